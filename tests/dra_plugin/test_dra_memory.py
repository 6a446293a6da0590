"""Memory placement through the kubelet's door: a claim whose opaque config asks for `local`
memory gets `dra.cpu/memoryNodes` in its device metadata file and `memoryNodes` in its
status.devices data; a wrong value fails the prepare with the field's name. Real topology,
allocator and dra-plugin processes on xeon-2s-ht (NUMA node 1 = CPUs 10-19,30-39)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from harness.dra_plugin_node import Node, claim, result
from harness.waits import eventually

from dracpu.dev.kubelet_sim import Claim, KubeletSim


def memory_config(value: object) -> list[dict[str, Any]]:
    parameters = {"apiVersion": "v1alpha1", "cpuConfig": {"memoryPlacement": value}}
    return [{"source": "FromClaim", "requests": [],
             "opaque": {"driver": "dra.cpu", "parameters": parameters}}]  # fmt: skip


async def test_a_placed_claim_shows_its_memory_nodes_in_metadata_and_status(
    started: Node,
) -> None:
    plugin = await KubeletSim(started.kubelet_root).register("dra.cpu", timeout=15)
    u = str(uuid.uuid4())
    started.write_claim(
        claim("mem", u, [result("cpudevnuma001", cpus=2)], config=memory_config("local"))
    )
    assert (await plugin.prepare([Claim("default", "mem", u)]))[u].error == ""
    metadata = started.kubelet_root / "plugins/dra.cpu/dra-device-metadata/default_mem/cpus"
    document = json.loads((metadata / "metadata.json").read_text())
    (device,) = document["requests"][0]["devices"]
    assert device["attributes"]["dra.cpu/memoryNodes"] == {"string": "1"}

    async def data() -> dict[str, Any] | None:
        devices = started.read_claim("default", "mem")["status"].get("devices") or []
        return devices[0]["data"] if devices else None

    written = await eventually(data, "the claim's status.devices entry")
    assert written["memoryNodes"] == [1] and written["numaNodes"] == [1]

    plain = str(uuid.uuid4())
    started.write_claim(claim("plain", plain, [result("cpudevnuma001", cpus=2)]))
    assert (await plugin.prepare([Claim("default", "plain", plain)]))[plain].error == ""
    metadata = started.kubelet_root / "plugins/dra.cpu/dra-device-metadata/default_plain/cpus"
    document = json.loads((metadata / "metadata.json").read_text())
    (device,) = document["requests"][0]["devices"]
    assert "dra.cpu/memoryNodes" not in device["attributes"]
    await plugin.close()


async def test_a_wrong_value_fails_the_prepare_naming_the_field(started: Node) -> None:
    plugin = await KubeletSim(started.kubelet_root).register("dra.cpu", timeout=15)
    u = str(uuid.uuid4())
    started.write_claim(
        claim("bad", u, [result("cpudevnuma001", cpus=2)], config=memory_config("strict"))
    )
    error = (await plugin.prepare([Claim("default", "bad", u)]))[u].error
    assert "opaque config: cpuConfig.memoryPlacement: 'strict' is not one of local, none" in error
    await plugin.close()
