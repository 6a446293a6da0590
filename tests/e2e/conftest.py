"""The e2e tier installs what an operator installs: the release in dist/ (`make release`,
tools/release.sh; remade first when its inputs changed). tools/cluster.sh brings up the one-node
cluster (control plane, containerd, kubelet) with the release's image archives loaded into the
node's runtime, the packaged chart (.tgz) is installed once per session, and every scenario
runs against it. DRACPU_E2E_KEEP=1 leaves the cluster running afterwards; DRACPU_RUNTIME=crio
runs the node on CRI-O instead of containerd."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.cluster import ROOT, Cluster, say, step
from harness.release_dist import Dist, make_release
from harness.tier_end import TierEnd
from harness.waits import wait_for
from tiers import require_root

TIER = TierEnd(Path(__file__).parent)  # the cluster goes down after the tier's last test


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    TIER.after(item, nextitem)


def _missing() -> str:
    done = subprocess.run(
        ["bash", str(ROOT / "tools/cluster.sh"), "missing"], capture_output=True, text=True
    )
    return "; ".join(done.stdout.split("\n")).strip("; ")


def pytest_report_header(config: pytest.Config) -> str:
    done = subprocess.run(
        ["bash", str(ROOT / "tools/cluster.sh"), "runtime"], capture_output=True, text=True
    )
    runtime = done.stdout.strip() or done.stderr.strip()
    selected = os.environ.get("DRACPU_RUNTIME", "") or "containerd"
    return f"e2e node runtime: {runtime} (DRACPU_RUNTIME={selected}, tools/cluster.sh)"


@pytest.fixture(scope="session")
def dist() -> Dist:
    """dist/ as `make release` writes it (nothing is redone when it is up to date)."""
    require_root("e2e")
    with step("the release in dist/ (tools/release.sh)"):
        made = make_release()
    say(f"release {made.version}: chart {made.chart.name}, {len(made.images)} image archives")
    return made


@pytest.fixture(scope="session")
def cluster(dist: Dist) -> Iterator[Cluster]:
    require_root("e2e")
    reason = _missing()
    if reason:
        pytest.skip(f"e2e tier: {reason}")
    if not (ROOT / ".tools/bin/helm").exists():
        pytest.skip("e2e tier: helm not installed (tools/install-helm.sh)")
    with pytest.MonkeyPatch.context() as patch:
        # tools/cluster.sh loads these into the node's runtime (and retags from them on CRI-O).
        patch.setenv("DRACPU_CLUSTER_IMAGES", " ".join(str(a) for a in dist.archives))
        yield from _cluster(dist)


def _cluster(dist: Dist) -> Iterator[Cluster]:
    def down() -> None:
        if not os.environ.get("DRACPU_E2E_KEEP"):
            with step("cluster down"):
                subprocess.run(["bash", str(ROOT / "tools/cluster.sh"), "down"], check=False)

    down = TIER.at_end(down)
    try:
        with step("cluster up (tools/cluster.sh up)"):
            done = subprocess.run(
                ["bash", str(ROOT / "tools/cluster.sh"), "up"], capture_output=True, text=True
            )
            if done.returncode != 0:
                raise AssertionError(f"tools/cluster.sh up failed: {done.stderr.strip()}")
        node = Cluster(chart=dist.chart)
        say(f"node runtime: {node.runtime_version()} (CRI socket {node.env['RUNTIME_SOCKET']})")
        yield node
    finally:
        down()  # a bring-up that failed half-way is taken down too


@pytest.fixture(scope="session")
def driver(cluster: Cluster) -> Iterator[Cluster]:
    """The chart installed and its pod Ready; uninstalled at the end of the session."""
    with step(f"helm install {cluster.chart.name} (the packaged chart, {cluster.chart.parent})"):
        cluster.install()
    with step("driver pod Ready"):
        pod = wait_for(cluster.driver_ready, "driver pod Ready", timeout=120, interval=0.3)
    statuses = pod["status"]["containerStatuses"]
    started = max(s["state"]["running"]["startedAt"] for s in statuses if "running" in s["state"])
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    say(f"driver pod: last container started {started}, Ready at {ready['lastTransitionTime']}")
    wait_for(lambda: cluster.published(), "ResourceSlice published", timeout=60, interval=0.3)
    yield cluster


@pytest.fixture
def installed(driver: Cluster) -> Cluster:
    """The chart installed and publishing before the test, installed again when an earlier
    module uninstalled it (test_e2e_scenarios.py's last test does)."""
    if driver.driver_pod() is None:
        with step(f"helm install {driver.chart.name} again (an earlier module uninstalled it)"):
            driver.install()
        wait_for(driver.driver_ready, "driver pod Ready", timeout=120, interval=0.3)
    wait_for(lambda: driver.published(), "ResourceSlice published", timeout=60, interval=0.3)
    return driver
