"""From the allocator's claim record to the API's ClaimView (rpc.wire.claim_to_proto, then
translate.claim), as a property: every field the view shows is the record's; and what a
container's view says it runs on."""

from __future__ import annotations

import pytest
from harness.claim_records import claim_records
from hypothesis import HealthCheck, given, settings

from dracpu.allocator.claims import ClaimRecord
from dracpu.allocator.rpc.wire import claim_to_proto
from dracpu.api import translate
from dracpu.core.driver import cdi_device_id
from dracpu.pb.nri_plugin.v1 import nri_plugin_pb2

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(claim_records())
def test_a_claims_view_shows_its_record(record: ClaimRecord) -> None:
    view = translate.claim(claim_to_proto(record))
    assert (view.uid, view.namespace, view.name) == (record.uid, record.namespace, record.name)
    assert (view.cpus, view.cpu_count) == (record.cpus.format(), len(record.cpus))
    assert [(d.request, d.pool, d.device, d.cpus) for d in view.devices] == [
        (a.request, a.pool, a.device, a.cpus.format()) for a in record.allocations
    ]
    assert view.policy == (record.policy or ("recovered" if record.recovered else ""))
    assert view.cdi_device_id == cdi_device_id(record.uid)
    assert view.memory_nodes == record.memory_nodes.format()
    assert view.shared_pool == ("include" if record.shares_pool else "exclude")
    assert [(m.numa_node, m.kind, m.bytes) for m in view.memory] == [
        (m.node, m.kind, m.bytes) for m in record.memory
    ]
    prepared = view.prepared_at
    if record.prepared_at_ns:
        # To the microsecond a datetime holds, give or take a float's rounding of the seconds.
        assert prepared is not None
        assert abs(prepared.timestamp() * 1e9 - record.prepared_at_ns) < 1e3 * max(
            1, record.prepared_at_ns / 1e15
        )
    else:
        assert prepared is None
    if record.owner is None or not record.container_id:
        assert view.owner is None  # no container has presented the claim
    else:
        owner = view.owner
        assert owner is not None and owner.running
        assert (owner.container_id, owner.pod_uid, owner.container_name) == (
            record.container_id, record.owner.pod_uid, record.owner.container_name)  # fmt: skip
        assert (owner.pod_namespace, owner.pod_name) == (
            record.owner.pod_namespace, record.owner.pod_name)  # fmt: skip


@pytest.mark.parametrize(
    ("claims", "exclusive", "claimed_cpus", "runs_on"),
    [
        (["uid-a"], True, "", "claimed"),
        (["uid-a"], True, "2-3", "claimed + shared"),
        ([], False, "", "shared"),
    ],
    ids=["claimed", "claimed-and-shared", "shared"],
)
def test_a_containers_view_says_what_it_runs_on(
    claims: list[str], exclusive: bool, claimed_cpus: str, runs_on: str
) -> None:
    reply = nri_plugin_pb2.ContainerList(
        containers=[
            nri_plugin_pb2.ContainerView(
                container_id="c",
                claim_uids=claims,
                cpus="0-3",
                exclusive=exclusive,
                claimed_cpus=claimed_cpus,
                state="running",
            )
        ]
    )
    (view,) = translate.containers(reply).containers
    assert (view.runs_on, view.claimed_cpus, view.exclusive) == (runs_on, claimed_cpus, exclusive)
