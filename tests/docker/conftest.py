"""Fixtures of the docker tier: a private Docker engine started for the session and stopped by
its PID at the end, every image built on it (offline) once, and the compose project brought up
on them (`stack`, harness/compose_stack.py)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.compose_stack import stack as stack  # the compose project, for a module
from harness.docker_engine import BUILD, ROOT, TIER, Engine, engine_env, tier, tier_env
from harness.tier_end import TierEnd
from tiers import require_root

TIER_END = TierEnd(Path(__file__).parent)  # the engine stops after the tier's last test


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    TIER_END.after(item, nextitem)


@pytest.fixture(scope="session")
def engine() -> Iterator[Engine]:
    require_root("docker")
    check = subprocess.run(
        ["bash", str(TIER), "check"], capture_output=True, text=True, check=False
    )
    if check.returncode != 0:
        pytest.skip(f"docker tier: {check.stdout.strip()}")
    tier("start", timeout=120)
    stop = TIER_END.at_end(lambda: tier("stop", timeout=120))
    try:
        base = tier("base", timeout=300).strip().splitlines()[-1]
        chart = (ROOT / "helm" / "dra-driver-cpu" / "Chart.yaml").read_text()
        match = re.search(r'^appVersion: "([^"]+)"', chart, flags=re.MULTILINE)
        assert match
        yield Engine(env=engine_env(), base_image=base, tag=match.group(1))
    finally:
        stop()


@pytest.fixture(scope="session")
def images(engine: Engine) -> Engine:
    """The five service images and the compose dev image, built with no network."""
    result = subprocess.run(
        ["bash", str(BUILD), "build"],
        env={**tier_env(), **engine.env, "BASE_IMAGE": engine.base_image, "TAG": engine.tag},
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return engine
