"""A claim record (claims.model.ClaimRecord) and its file (store.records), as properties: any
record written as JSON reads back as the same record, and so does its checksummed file."""

from __future__ import annotations

import json

from harness.claim_records import claim_records
from hypothesis import HealthCheck, given, settings

from dracpu.allocator.claims import ClaimRecord
from dracpu.allocator.store import records

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(claim_records())
def test_a_record_written_as_json_reads_back_as_the_same_record(record: ClaimRecord) -> None:
    body = json.loads(json.dumps(records.record_to_json(record)))
    assert records.record_from_json(body) == record


@SETTINGS
@given(claim_records())
def test_a_records_file_reads_back_as_the_same_record(record: ClaimRecord) -> None:
    data = records.encode_record(record)
    assert records.decode_record(data, "test", record.uid) == record
