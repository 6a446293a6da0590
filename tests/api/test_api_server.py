"""`dracpu-api` as a process: its flags, and its OpenAPI document checked by schemathesis
against the running server (no 500s; every response matches its documented schema, status
code, content type and headers): in the real pod, and with two services down."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from harness.api_stack import SERVICES, ServiceSet, Stack, running_services, start_api, stop_api
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from dracpu.api.flags import parse_bind_address
from dracpu.core.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(":8080", ("0.0.0.0", 8080), id="every-interface"),
        pytest.param("127.0.0.1:0", ("127.0.0.1", 0), id="ephemeral"),
        pytest.param("[::1]:9000", ("::1", 9000), id="ipv6"),
        pytest.param("localhost:65535", ("localhost", 65535), id="name"),
    ],
)
def test_bind_address_parses(text: str, expected: tuple[str, int]) -> None:
    assert parse_bind_address(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("8080", id="no-colon"),
        pytest.param("host:", id="no-port"),
        pytest.param(":http", id="named-port"),
        pytest.param(":70000", id="port-too-big"),
        pytest.param(":-1", id="negative"),
    ],
)
def test_bad_bind_address_is_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="--bind-address"):
        parse_bind_address(text)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--bind-address", "nope"], "--bind-address 'nope'", id="bind-address"),
        pytest.param(["--backend-timeout", "0"], "--backend-timeout 0", id="timeout"),
        pytest.param(["--reserved-cpus", "3-1"], "reservedCPUs", id="config"),
        pytest.param(["--bogus"], "unrecognized arguments: --bogus", id="unknown-flag"),
        pytest.param(
            ["--allocator-socket", "/tmp/" + "x" * 120], "unix socket path", id="long-socket"
        ),
    ],
)
def test_bad_flags_give_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "dracpu.api.main", "--bind-address", "127.0.0.1:0", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    # Warnings are klog lines (severity W); the refusal is the one other line.
    lines = [line for line in result.stderr.splitlines() if not line.startswith("W")]
    assert len(lines) == 1, result.stderr
    assert message in lines[0]


def test_server_answers_on_its_bind_address(services: ServiceSet) -> None:
    api = start_api(services)
    try:
        with httpx.Client(base_url=api.url, timeout=5) as http:
            assert http.get("/healthz").json() == {"status": "ok"}
            node = http.get("/v1/node").json()
            assert node["node_name"] == "node-a"
            assert [v["status"] for v in node["versions"]] == ["available"] * 5
            assert http.get("/readyz").json()["services"] == dict.fromkeys(SERVICES, "SERVING")
    finally:
        stop_api(api)
    assert api.process.returncode == 0


# ---- schemathesis ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def api_schema(stack: Stack) -> object:
    """The real pod (`dracpu dev up`) with three claims."""
    return schemathesis.from_uri(f"{stack.url}/openapi.json", base_url=stack.url)


# FastAPI writes OpenAPI 3.1, which schemathesis 3.x checks behind this switch.
schemathesis.experimental.OPEN_API_3_1.enable()
schema = schemathesis.from_pytest_fixture("api_schema")

CHECKS = (
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
)


@schema.parametrize()
@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_every_operation_conforms_to_the_schema(case: schemathesis.Case) -> None:
    call_and_validate(case, CHECKS)


def call_and_validate(case: schemathesis.Case, checks: tuple[Any, ...]) -> None:
    """JSON is UTF-8 (RFC 8259); without a charset parameter, a `+json` body would be decoded
    by guessing, and an echoed path of random CJK bytes can be guessed as Shift-JIS."""
    response = case.call(timeout=10)
    response.encoding = "utf-8"
    case.validate_response(response, checks=checks)


@pytest.fixture(scope="module")
def degraded_api_schema() -> Iterator[object]:
    """The allocator and the nri-plugin down: 503 problems and `unavailable` parts."""
    with running_services() as degraded:
        degraded.stop("allocator")
        degraded.stop("nri-plugin")
        api = start_api(degraded)
        try:
            yield schemathesis.from_uri(f"{api.url}/openapi.json", base_url=api.url)
        finally:
            stop_api(api)


degraded_schema = schemathesis.from_pytest_fixture("degraded_api_schema")


def not_an_internal_error(response: object, case: schemathesis.Case) -> None:
    """503 naming the missing service is the intended answer here; 500 never is."""
    status = response.status_code  # type: ignore[attr-defined]
    assert status != 500, f"500 from {case.method} {case.formatted_path}"


DEGRADED_CHECKS = (not_an_internal_error, *CHECKS[1:])


@degraded_schema.parametrize()
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_degraded_answers_conform_to_the_schema(case: schemathesis.Case) -> None:
    call_and_validate(case, DEGRADED_CHECKS)
