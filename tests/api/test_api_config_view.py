"""`/v1/node`'s `config`: every field of the driver configuration's model, answered and described
by the OpenAPI document without a field list of the api's own, so a field added to the model can
never make the answer fail."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from dracpu.api.app import create_app
from dracpu.api.backends import Backends
from dracpu.core.config import DriverConfig
from dracpu.core.config_model import FIELDS


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The api with every service down: the configuration is its own to answer."""
    sockets = {
        s: str(tmp_path / f"{s}.sock")
        for s in ("topology", "allocator", "dra-plugin", "nri-plugin")
    }
    config = DriverConfig.model_validate(
        {"groupBy": "socket", "reservedCPUs": "1,0", "publishMemoryDevices": True}
    )
    app = create_app(Backends.from_sockets(sockets, timeout=1.0), config)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://api"
    ) as http:
        yield http


def config_schema(document: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = document["components"]["schemas"]["NodeView"]["properties"]["config"]
    return schema


async def test_every_field_of_the_model_is_answered_as_the_file_spells_it(
    client: httpx.AsyncClient,
) -> None:
    reply = await client.get("/v1/node")
    assert reply.status_code == 200
    config = reply.json()["config"]
    assert list(config) == [field.spelling for field in FIELDS]
    assert config["groupBy"] == "socket"
    assert config["reservedCPUs"] == "0-1"
    assert config["publishMemoryDevices"] is True
    assert config["apiVersion"] is None  # the file gave none
    assert config["memoryPlacement"] == "none"


async def test_the_answer_fits_the_schema_the_openapi_document_gives(
    client: httpx.AsyncClient,
) -> None:
    schema = config_schema((await client.get("/openapi.json")).json())
    assert list(schema["properties"]) == [field.spelling for field in FIELDS]
    assert schema["additionalProperties"] is False
    config = (await client.get("/v1/node")).json()["config"]
    jsonschema.validate(config, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(config | {"groupBy": "rack"}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(config | {"unknownField": 1}, schema)
