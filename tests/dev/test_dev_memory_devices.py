"""`dracpu dev up` on a 4-NUMA machine with per-node memory and hugepage pools: with
publishMemoryDevices, `/v1/devices` lists one memory device per NUMA node, its capacity the
node's memory (more than 0, at most its MemTotal) and exactly its pools, with its NUMA node;
the CPU devices are those listed without the key, and without it no memory device is listed.
The ResourceSlices published are what the API server stores, and CPU claims go on as before.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest
from harness.dev_up import DevUp, free_port
from harness.helm import KUBE_VERSION
from harness.slice_rules import qualified_name_refusal, slice_refusals
from harness.waits import wait_for

from dracpu.core.memory import binary_quantity
from dracpu.dev.apiserver.client import ClusterClient
from dracpu.dev.layout import RunLayout

pytestmark = pytest.mark.timeout(240)

FIXTURE = "numa4-hugepages"
MEMORY = "dra.cpu/memory"
NUMA = "resource.kubernetes.io/numaNode"
QUANTITY_UNITS = {"": 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}


def quantity_bytes(text: str) -> int:
    """A binary quantity as this driver writes them, in bytes (read here independently)."""
    digits = text.rstrip("KMGTi")
    return int(digits) * QUANTITY_UNITS[text[len(digits) :]]


@dataclass
class Run:
    root: Path
    url: str
    output: Path

    def get(self, path: str) -> Any:
        reply = httpx.get(self.url + path, timeout=10)
        assert reply.status_code == 200, reply.text
        return reply.json()

    def dev(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "dracpu.core.cli", "dev", *args, "--run-dir", str(self.root)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def slices(self) -> list[dict[str, Any]]:
        cluster = ClusterClient(RunLayout.at(self.root).apiserver_kubeconfig)
        try:
            return cluster.slices()
        finally:
            cluster.close()


@contextlib.contextmanager
def dev_up(config: str) -> Iterator[Run]:
    """`dracpu dev up` on the fixture machine with `config`, the simulated runtime and kubelet."""
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="dmd-"))
    (root / "config.yaml").write_text(config)
    extra = ("--fixture", FIXTURE, "--config", str(root / "config.yaml"))
    dev = DevUp(root / "run", free_port(), extra=extra, runtime_sim=True)
    try:
        dev.start(timeout=90)
        yield Run(dev.run_dir, dev.url, dev.log_file)
    finally:
        dev.stop(60)
        shutil.rmtree(root, ignore_errors=True)
        dev.log_file.unlink(missing_ok=True)


def published(run: Run) -> dict[str, Any]:
    """/v1/devices once the dra-plugin has published the current generation."""

    def current() -> dict[str, Any] | None:
        view: dict[str, Any] = run.get("/v1/devices")
        publication = view["publication"]
        return view if publication.get("up_to_date") else None

    result: dict[str, Any] = wait_for(current, "devices published", timeout=60)
    return result


@pytest.fixture(scope="module")
def with_key() -> Iterator[tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]]:
    with dev_up("publishMemoryDevices: true\n") as run:
        devices = published(run)
        topology = run.get("/v1/topology")
        slices = run.slices()
        # A CPU claim is placed as before, on a CPU device.
        claimed = run.dev("claim", "--cpus", "2")
        assert claimed.returncode == 0, claimed.stderr
        assert "devices=cpudevnuma" in claimed.stdout
        yield devices, topology, slices


@pytest.fixture(scope="module")
def without_key() -> Iterator[dict[str, Any]]:
    with dev_up("apiVersion: v1alpha1\n") as run:
        yield published(run)


def memory_devices(view: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for d in view["devices"] if MEMORY in d["capacity"]]


def test_one_memory_device_per_numa_node_with_its_memory_and_pools(
    with_key: tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]],
) -> None:
    devices, topology, _ = with_key
    nodes = {memory["numa_node_id"]: memory for memory in topology["memory"]}
    assert sorted(nodes) == [0, 1, 2, 3]
    memory = memory_devices(devices)
    assert [d["attributes"][NUMA] for d in memory] == [{"int": n} for n in range(4)]
    for device in memory:
        node = nodes[device["attributes"][NUMA]["int"]]
        assert 0 < quantity_bytes(device["capacity"][MEMORY]) <= node["mem_total_bytes"]
        pools = {
            key: quantity_bytes(value) for key, value in device["capacity"].items() if key != MEMORY
        }
        assert pools == {
            f"dra.cpu/hugepages{pool['size']}": pool["total_bytes"] for pool in node["hugepages"]
        }
        assert device["allow_multiple_allocations"] is True
        assert device["cpus"] == ""
    # The fixture's own numbers, written out: node 0 has both sizes, node 1 only 2 MiB pages.
    assert memory[0]["capacity"] == {
        MEMORY: "13Gi",
        "dra.cpu/hugepages2Mi": "1Gi",
        "dra.cpu/hugepages1Gi": "2Gi",
    }
    assert memory[1]["capacity"] == {MEMORY: "7680Mi", "dra.cpu/hugepages2Mi": "512Mi"}


def test_topology_reports_each_nodes_memory(
    with_key: tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]],
) -> None:
    _, topology, _ = with_key
    node2 = topology["memory"][2]
    assert node2["mem_total_bytes"] == (16 << 30) - (4 << 20)
    assert node2["hugepages"] == [
        {"size": "2Mi", "size_bytes": 2 << 20, "total": 0, "free": 0, "total_bytes": 0},
        {"size": "1Gi", "size_bytes": 1 << 30, "total": 4, "free": 3, "total_bytes": 4 << 30},
    ]
    assert node2["problems"] == []


def test_the_cpu_devices_are_the_same_as_without_the_key(
    with_key: tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]],
    without_key: dict[str, Any],
) -> None:
    devices, _, _ = with_key

    def cpu_devices(view: dict[str, Any]) -> list[dict[str, Any]]:
        # What each device is, not what claims made of it at the moment.
        return [
            {k: v for k, v in d.items() if k not in ("consumed", "health")}
            for d in view["devices"]
            if MEMORY not in d["capacity"]
        ]

    assert cpu_devices(devices) == cpu_devices(without_key)
    assert [d["name"] for d in cpu_devices(devices)] == [f"cpudevnuma00{n}" for n in range(4)]


def test_without_the_key_no_memory_device_is_listed(without_key: dict[str, Any]) -> None:
    assert memory_devices(without_key) == []
    assert not any(d["name"].startswith("memory-") for d in without_key["devices"])
    assert all(set(d["capacity"]) == {"dra.cpu/cpu"} for d in without_key["devices"])


def test_the_published_slices_are_what_the_api_server_stores(
    with_key: tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]],
) -> None:
    devices, _, slices = with_key
    names = [d["name"] for s in slices for d in s["spec"]["devices"]]
    assert names == [d["name"] for d in devices["devices"]]
    for resource_slice in slices:
        assert kubernetes_validate.validate(resource_slice, KUBE_VERSION, strict=True)
        assert slice_refusals(resource_slice) == []
    memory = [d for s in slices for d in s["spec"]["devices"] if d["name"].startswith("memory-")]
    assert memory[3] == {
        "name": "memory-node-3",
        "attributes": {NUMA: {"int": 3}},
        "capacity": {MEMORY: {"value": "10Gi"}, "dra.cpu/hugepages2Mi": {"value": "2Gi"}},
        "allowMultipleAllocations": True,
    }


def test_the_slice_rules_refuse_what_the_api_server_refuses() -> None:
    # Why the pools' capacities are hugepages2Mi and not the node resource's hugepages-2Mi.
    assert qualified_name_refusal("dra.cpu/hugepages-2Mi") == (
        "dra.cpu/hugepages-2Mi: 'hugepages-2Mi' is not a C identifier"
    )
    assert qualified_name_refusal("dra.cpu/hugepages2Mi") is None
    assert qualified_name_refusal(NUMA) is None
    bad = {
        "spec": {
            "devices": [
                {"name": "Memory_0", "capacity": {MEMORY: {"value": "lots"}}},
                {"name": "ok", "attributes": {f"dra.cpu/a{i}": {"int": i} for i in range(33)}},
            ]
        }
    }
    assert slice_refusals(bad) == [
        "device name 'Memory_0' is not a DNS label",
        "device Memory_0: capacity dra.cpu/memory: {'value': 'lots'} is not a quantity",
        "device ok: more than 32 attributes and capacities",
    ]
    assert binary_quantity(quantity_bytes("12284Mi")) == "12284Mi"
