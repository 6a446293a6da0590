"""Commands that talk to no service start without the heavy libraries: each runs in a fresh
interpreter and reports which of them ended up in sys.modules."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = (
    "grpc",
    "google.protobuf",
    "pydantic",
    "fastapi",
    "starlette",
    "uvicorn",
    "kubernetes_asyncio",
    "kubernetes",
    "prometheus_client",
    "yaml",
    "asyncio",
)

PROBE = """
import contextlib, io, json, sys
from dracpu.core.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        code = main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param([], id="no-arguments"),
        pytest.param(["--help"], id="help"),
        pytest.param(["version"], id="version"),
        pytest.param(["no-such-command"], id="unknown-command"),
        pytest.param(["simulate", "--help"], id="simulate-help"),
        pytest.param(["simulate", "--count", "x"], id="simulate-bad-flag"),
        pytest.param(["validate", "--help"], id="validate-help"),
        pytest.param(["validate"], id="validate-no-file"),
        pytest.param(["gatherinfo", "--help"], id="gatherinfo-help"),
        pytest.param(["introspect", "--help"], id="introspect-help"),
        pytest.param(["introspect", "metrics"], id="introspect-metrics"),
        pytest.param(["health", "--help"], id="health-help"),
        pytest.param(["uninstall-check", "--help"], id="uninstall-check-help"),
        pytest.param(["dev", "--help"], id="dev-help"),
        pytest.param(["dev", "up", "--help"], id="dev-up-help"),
        pytest.param(["dev", "claim", "--help"], id="dev-claim-help"),
        pytest.param(["dev", "release", "--help"], id="dev-release-help"),
        pytest.param(["dev", "prepare", "--help"], id="dev-prepare-help"),
        pytest.param(["dev", "unprepare", "--help"], id="dev-unprepare-help"),
        pytest.param(["dev", "status", "--help"], id="dev-status-help"),
        pytest.param(["introspect", "metrics", "--help"], id="introspect-metrics-help"),
    ],
)
def test_light_commands_import_no_heavy_module(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    loaded = [
        heavy
        for heavy in HEAVY
        if any(m == heavy or m.startswith(heavy + ".") for m in report["modules"])
    ]
    assert loaded == [], f"dracpu {' '.join(argv)} imported {loaded}"
    # The probe ran the command for real: the help paths exit 0, bad input exits 2.
    assert report["code"] in (0, 2)


SERVICE_PROBE = """
import contextlib, importlib, io, json, sys
main = importlib.import_module(sys.argv[1]).main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
    try:
        code = main(sys.argv[2:])
    except SystemExit as exc:
        code = exc.code
print(json.dumps({"code": code, "stderr": err.getvalue(), "modules": sorted(sys.modules)}))
"""

# Each service's entry module (the console script's target), and the exit code each probe ends in.
SERVICES = {
    "topology": "dracpu.topology.main",
    "allocator": "dracpu.allocator.main",
    "dra-plugin": "dracpu.dra_plugin.main",
    "nri-plugin": "dracpu.nri_plugin.main",
    "api": "dracpu.api.main",
}
SERVICE_ARGV = {
    "help": (["--help"], 0),
    "version": (["--version"], 0),
    "unknown-flag": (["--no-such-flag"], 2),
    "bad-verbosity": (["-v", "99"], 2),
}


@pytest.mark.parametrize("case", SERVICE_ARGV)
@pytest.mark.parametrize("service", SERVICES)
def test_service_command_lines_answer_before_loading_the_service(service: str, case: str) -> None:
    """--help, --version and bad flags are answered from the argument parser alone: gRPC,
    FastAPI, pydantic, the kubernetes client and prometheus_client are loaded only to serve."""
    argv, expected = SERVICE_ARGV[case]
    done = subprocess.run(
        [sys.executable, "-c", SERVICE_PROBE, SERVICES[service], *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["code"] == expected
    if expected:
        # One line on stderr, no traceback.
        assert report["stderr"].count("\n") == 1, report["stderr"]
        assert "Traceback" not in report["stderr"]
    loaded = [
        heavy
        for heavy in HEAVY
        if any(m == heavy or m.startswith(heavy + ".") for m in report["modules"])
    ]
    assert loaded == [], f"dracpu-{service} {' '.join(argv)} imported {loaded}"
