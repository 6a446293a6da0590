"""The dra-plugin as the kubelet sees it: registration, prepare/unprepare in both DRA API
versions, per-claim errors, idempotency, allocator restarts, health and metrics.

Real processes (topology on a sysfs fixture, allocator, dra-plugin) on temporary unix sockets;
the kubelet stand-in speaks the kubelet's gRPC contracts.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from harness.dra_plugin_node import BIN, NODE, Node, claim, result
from harness.waits import eventually
from logformats import klog_lines, parse_klog

from dracpu.core import rpc
from dracpu.dev.kubelet_sim import Claim, KubeletSim, PluginRejected, RegisteredPlugin
from dracpu.pb.common.v1 import info_pb2, info_pb2_grpc
from dracpu.pb.dra_plugin.v1 import dra_plugin_pb2, dra_plugin_pb2_grpc

pytestmark = pytest.mark.timeout(120)


def uid() -> str:
    return str(uuid.uuid4())


async def register(node: Node, **kw: object) -> RegisteredPlugin:
    return await KubeletSim(node.kubelet_root, **kw).register("dra.cpu", timeout=15)  # type: ignore[arg-type]


async def status(node: Node) -> dra_plugin_pb2.PluginStatus:
    async with rpc.channel(node.sock("plugin")) as chan:
        stub = dra_plugin_pb2_grpc.DRAPluginViewStub(chan)
        return await stub.GetStatus(dra_plugin_pb2.GetStatusRequest(), timeout=5)


async def metrics_text(node: Node) -> str:
    async with rpc.channel(node.sock("plugin")) as chan:
        stub = info_pb2_grpc.InfoStub(chan)
        reply = await stub.GetMetrics(info_pb2.GetMetricsRequest(), timeout=5)
        return str(reply.text)


async def registration_health(node: Node) -> str:
    async with rpc.channel(node.sock("plugin")) as chan:
        stub = health_pb2_grpc.HealthStub(chan)
        reply = await stub.Check(health_pb2.HealthCheckRequest(service="kubelet-registration"))
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


def cdi_env(node: Node, claim_uid: str) -> str:
    spec = json.loads((node.cdi / f"dra.k8s.io-cpu_claim-{claim_uid}.json").read_text())
    (env,) = spec["devices"][0]["containerEdits"]["env"]
    key, value = env.split("=", 1)
    assert key == f"DRA_CPUSET_{claim_uid}"
    return str(value)


async def test_registration_advertises_both_dra_versions_and_health(started: Node) -> None:
    plugin = await register(started)
    assert plugin.info.type == "DRAPlugin"
    assert plugin.info.name == "dra.cpu"
    assert plugin.info.endpoint == str(started.kubelet_root / "plugins/dra.cpu/dra.sock")
    assert list(plugin.info.supported_versions) == [
        "v1.DRAPlugin",
        "v1beta1.DRAPlugin",
        "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth",
    ]
    assert (plugin.dra_version, plugin.health_version) == ("v1", "v1")
    registration_socket = started.kubelet_root / "plugins_registry/dra.cpu/dra.cpu-reg.sock"
    assert plugin.registration_socket == registration_socket

    async def registered() -> bool:
        return (await status(started)).registered

    await eventually(registered, "status shows the registration")
    assert await registration_health(started) == "SERVING"
    view = await status(started)
    assert (view.node_name, view.registration_error) == (NODE, "")
    assert view.claim_source == "kubernetes"
    await plugin.close()


async def test_the_kubelet_learns_of_the_plugin_once_the_allocators_devices_are_in(
    node: Node,
) -> None:
    """The kubelet asks GetInfo the moment the registration socket appears and waits one
    second for the answer; a plugin that misses it is asked again only after the kubelet's
    backoff for that socket (seen at 64 s on a loaded node, after a crashed plugin's socket
    had failed a few times). So the socket appears once the plugin is past its start: its DRA
    endpoint and view serving, the allocator's devices in."""
    await node.start_topology()
    await node.start_plugin()  # the view serving; the allocator not started yet
    registration_socket = node.kubelet_root / "plugins_registry/dra.cpu/dra.cpu-reg.sock"
    assert (node.kubelet_root / "plugins/dra.cpu/dra.sock").exists()
    assert not registration_socket.exists()
    await node.start_allocator()
    await eventually(registration_socket.exists, "the registration socket once the devices are in")
    plugin = await register(node)
    assert plugin.info.name == "dra.cpu"
    await plugin.close()


async def test_kubelet_that_only_knows_v1beta1_uses_it(started: Node) -> None:
    plugin = await register(
        started,
        dra_services=("v1beta1.DRAPlugin",),
        health_services=("v1alpha1.DRAResourceHealth",),
    )
    assert (plugin.dra_version, plugin.health_version) == ("v1beta1", "v1alpha1")
    c = uid()
    started.write_claim(claim("beta", c, [result("cpudevnuma001", cpus=2)]))
    answer = await plugin.prepare([Claim("default", "beta", c)])
    assert answer[c].error == ""
    assert [d.device_name for d in answer[c].devices] == ["cpudevnuma001"]
    await plugin.close()


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
async def test_prepare_and_unprepare_one_claim(started: Node, version: str) -> None:
    plugin = await register(started)
    c, share = uid(), uid()
    started.write_claim(claim("one", c, [result("cpudevnuma000", cpus=4, shareID=share)]))
    answer = await plugin.prepare([Claim("default", "one", c)], version=version)
    (device,) = answer[c].devices
    assert answer[c].error == ""
    # The scheduler's shareID for a device allocated many times goes back in v1 only.
    assert device.share_id == (share if version == "v1" else None)
    assert (device.request_names, device.pool_name, device.device_name) == (
        ["cpus"],
        NODE,
        "cpudevnuma000",
    )
    assert device.cdi_device_ids == [f"dra.k8s.io/cpu=claim-{c}", f"dra.cpu/metadata={c}_cpus"]
    cpus = cdi_env(started, c)
    # xeon-2s-ht: NUMA node 0 holds CPUs 0-9 and their siblings 20-29.
    assert cpus == "1-2,21-22"  # CPU 0 is kept for the shared pool

    metadata_file = (
        started.kubelet_root / "plugins/dra.cpu/dra-device-metadata/default_one/cpus/metadata.json"
    )
    # One v1beta1 document, as the reference writes it: the file parses as one JSON value.
    document = json.loads(metadata_file.read_text())
    assert document["apiVersion"] == "metadata.resource.k8s.io/v1beta1"
    (entry,) = document["requests"]
    assert entry["name"] == "cpus"
    (meta_device,) = entry["devices"]
    assert (meta_device["driver"], meta_device["pool"], meta_device["name"]) == (
        "dra.cpu",
        NODE,
        "cpudevnuma000",
    )
    assert meta_device["attributes"]["dra.cpu/allocatedNumCPUs"] == {"int": 4}
    assert meta_device["attributes"]["resource.kubernetes.io/numaNode"] == {"int": 0}
    spec = json.loads((started.cdi / f"dra.cpu_metadata_{c}_cpus.json").read_text())
    assert spec["kind"] == "dra.cpu/metadata"
    (mount,) = spec["devices"][0]["containerEdits"]["mounts"]
    assert mount == {
        "hostPath": str(metadata_file),
        "containerPath": "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/one/cpus/"
        "dra.cpu-metadata.json",
        "options": ["ro", "bind"],
    }

    assert await plugin.unprepare([Claim("default", "one", c)], version=version) == {c: ""}
    assert not (started.cdi / f"dra.k8s.io-cpu_claim-{c}.json").exists()
    assert not (started.cdi / f"dra.cpu_metadata_{c}_cpus.json").exists()
    assert not metadata_file.parent.parent.exists()
    await plugin.close()


async def test_configured_metadata_versions_make_a_versioned_stream(node: Node) -> None:
    await node.start_topology()
    await node.start_allocator()
    await node.start_plugin("--metadata-versions=v1beta1,v1alpha1")
    plugin = await register(node)
    c = uid()
    node.write_claim(claim("stream", c, [result("cpudevnuma000", cpus=2)]))
    answer = await plugin.prepare([Claim("default", "stream", c)])
    assert answer[c].error == ""
    metadata_file = (
        node.kubelet_root / "plugins/dra.cpu/dra-device-metadata/default_stream/cpus/metadata.json"
    )
    documents = [json.loads(line) for line in _json_stream(metadata_file.read_text())]
    # A KEP-5304 stream: one document per version, in the order given; same content.
    assert [d["apiVersion"] for d in documents] == [
        "metadata.resource.k8s.io/v1beta1",
        "metadata.resource.k8s.io/v1alpha1",
    ]
    assert documents[0]["requests"] == documents[1]["requests"]
    await plugin.close()


def _json_stream(text: str) -> list[str]:
    decoder = json.JSONDecoder()
    out, index = [], 0
    while index < len(text.rstrip()):
        obj, end = decoder.raw_decode(text, index)
        out.append(json.dumps(obj))
        index = end
        while index < len(text) and text[index].isspace():
            index += 1
    return out


# name -> (claim as stored, or None for absent; expected error fragment, "" = success)
def _good(name: str, device: str, cpus: int) -> object:
    return lambda u: claim(name, u, [result(device, cpus=cpus)])


# claim name -> (how the API server stores it, None = absent; error fragment, "" = success)
BAD_AND_GOOD = {
    "good": (_good("good", "cpudevnuma000", 2), ""),
    "not-allocated": (lambda u: claim("not-allocated", u, None), "not allocated"),
    "replaced": (
        lambda u: claim("replaced", str(uuid.uuid4()), [result("cpudevnuma000", cpus=1)]),
        "got replaced",
    ),
    "admin": (
        lambda u: claim("admin", u, [result("cpudevnuma001", cpus=1, adminAccess=True)]),
        "adminAccess",
    ),
    "no-capacity": (lambda u: claim("no-capacity", u, [result("cpudevnuma001")]), "dra.cpu/cpu"),
    "other-driver": (
        lambda u: claim("other-driver", u, [result("gpu0", driver="gpu.example.com")]),
        "",
    ),
    "absent": (None, "retrieve claim default/absent"),
    "unknown-device": (_good("unknown-device", "cpudevnuma009", 1), "cpudevnuma009"),
    "good-too": (_good("good-too", "cpudevnuma001", 3), ""),
}


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
async def test_one_bad_claim_never_fails_its_neighbours(started: Node, version: str) -> None:
    plugin = await register(started)
    uids = {name: uid() for name in BAD_AND_GOOD}
    for name, (make, _) in BAD_AND_GOOD.items():
        if make is not None:
            started.write_claim(make(uids[name]))  # type: ignore[operator]
    answer = await plugin.prepare(
        [Claim("default", name, uids[name]) for name in BAD_AND_GOOD], version=version
    )
    for name, (_, expected) in BAD_AND_GOOD.items():
        outcome = answer[uids[name]]
        if expected:
            assert expected in outcome.error, (name, outcome.error)
            assert outcome.devices == [], name
        else:
            assert outcome.error == "", (name, outcome.error)
    assert answer[uids["other-driver"]].devices == []
    assert len(cdi_env(started, uids["good"]).replace("-", ",").split(",")) >= 1
    assert [d.device_name for d in answer[uids["good-too"]].devices] == ["cpudevnuma001"]
    # The refused claims left nothing behind.
    for name in ("admin", "no-capacity", "unknown-device", "not-allocated"):
        assert not (started.cdi / f"dra.k8s.io-cpu_claim-{uids[name]}.json").exists(), name
    text = await metrics_text(started)
    assert 'dra_cpu_prepare_claims_total{result="success"} 3.0' in text
    assert 'dra_cpu_prepare_claims_total{result="error"} 6.0' in text
    assert "dra_cpu_prepare_claim_duration_seconds_count 9.0" in text
    await plugin.close()


async def test_repeated_prepare_answers_the_same(started: Node) -> None:
    plugin = await register(started)
    c = uid()
    started.write_claim(claim("again", c, [result("cpudevnuma001", cpus=6)]))
    first = await plugin.prepare([Claim("default", "again", c)])
    cpus = cdi_env(started, c)
    for version in ("v1", "v1beta1", "v1"):
        again = await plugin.prepare([Claim("default", "again", c)], version=version)
        assert again == first
        assert cdi_env(started, c) == cpus
    assert first[c].error == ""
    await plugin.close()


async def test_concurrent_batches_get_disjoint_cpus(started: Node) -> None:
    plugin = await register(started)
    uids = [uid() for _ in range(8)]
    for i, u in enumerate(uids):
        started.write_claim(claim(f"par-{i}", u, [result(f"cpudevnuma00{i % 2}", cpus=2)]))
    answers = await asyncio.gather(
        *(plugin.prepare([Claim("default", f"par-{i}", u)]) for i, u in enumerate(uids))
    )
    assert all(a[u].error == "" for a, u in zip(answers, uids, strict=True))
    seen: set[str] = set()
    for u in uids:
        cpus = set(_expand(cdi_env(started, u)))
        assert not cpus & seen
        seen |= cpus
    assert len(seen) == 16
    await plugin.close()


def _expand(text: str) -> list[str]:
    out = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        out.extend(str(i) for i in range(int(low), int(high or low) + 1))
    return out


async def test_unprepare_is_idempotent_and_needs_no_claim_object(started: Node) -> None:
    plugin = await register(started)
    unknown = uid()
    assert await plugin.unprepare([Claim("default", "never-seen", unknown)]) == {unknown: ""}
    c = uid()
    started.write_claim(claim("gone", c, [result("cpudevnuma000", cpus=1)]))
    assert (await plugin.prepare([Claim("default", "gone", c)]))[c].error == ""
    started.delete_claim("default", "gone")  # deleted from the API server before unprepare
    for version in ("v1", "v1beta1"):
        assert await plugin.unprepare([Claim("default", "gone", c)], version=version) == {c: ""}
    assert not (started.cdi / f"dra.k8s.io-cpu_claim-{c}.json").exists()
    text = await metrics_text(started)
    assert 'dra_cpu_unprepare_claims_total{result="success"} 3.0' in text
    await plugin.close()


async def test_an_unprepare_whose_metadata_cannot_be_removed_fails_after_the_release(
    started: Node,
) -> None:
    """The metadata is removed while the allocator releases the claim: a removal that fails
    is the claim's error, the CPUs are released all the same, and the kubelet's retry ends
    it once the folder can go."""
    plugin = await register(started)
    c = uid()
    started.write_claim(claim("stuck", c, [result("cpudevnuma000", cpus=1)]))
    assert (await plugin.prepare([Claim("default", "stuck", c)]))[c].error == ""
    claim_dir = started.kubelet_root / "plugins/dra.cpu/dra-device-metadata/default_stuck"
    moved = claim_dir.with_name("moved")
    claim_dir.rename(moved)
    claim_dir.write_text("not a folder")  # what rmtree cannot remove

    error = (await plugin.unprepare([Claim("default", "stuck", c)]))[c]
    assert "remove device metadata" in error
    assert not (started.cdi / f"dra.k8s.io-cpu_claim-{c}.json").exists()  # released

    claim_dir.unlink()
    moved.rename(claim_dir)
    assert await plugin.unprepare([Claim("default", "stuck", c)]) == {c: ""}
    assert not claim_dir.exists()
    assert not (started.cdi / f"dra.cpu_metadata_{c}_cpus.json").exists()
    await plugin.close()


async def test_allocator_restart_between_calls(started: Node) -> None:
    plugin = await register(started)
    first, second, third = uid(), uid(), uid()
    for name, u in (("r1", first), ("r2", second), ("r3", third)):
        started.write_claim(claim(name, u, [result("cpudevnuma000", cpus=2)]))
    assert (await plugin.prepare([Claim("default", "r1", first)]))[first].error == ""

    # Restarted before the next call: the plugin reconnects.
    started.stop("allocator")
    await started.start_allocator()
    assert (await plugin.prepare([Claim("default", "r2", second)]))[second].error == ""

    # Down while the kubelet calls: the call waits for the allocator and then succeeds.
    started.stop("allocator", signal.SIGKILL)
    pending = asyncio.create_task(plugin.prepare([Claim("default", "r3", third)]))
    await asyncio.sleep(0)  # let the call reach the plugin
    await started.start_allocator()
    assert (await pending)[third].error == ""
    cpus = [set(_expand(cdi_env(started, u))) for u in (first, second, third)]
    assert not (cpus[0] & cpus[1] or cpus[1] & cpus[2] or cpus[0] & cpus[2])
    assert await plugin.unprepare([Claim("default", "r1", first)]) == {first: ""}
    await plugin.close()


async def test_an_allocator_away_is_waited_for_as_long_as_the_kubelet_allows(
    started: Node,
) -> None:
    """Away longer than any fixed wait the plugin might pick (31 s), inside the kubelet's own
    deadline for the call: the prepare waits and succeeds."""
    plugin = await register(started)
    c = uid()
    started.write_claim(claim("slow", c, [result("cpudevnuma000", cpus=2)]))
    started.stop("allocator", signal.SIGKILL)
    pending = asyncio.create_task(plugin.prepare([Claim("default", "slow", c)], timeout=90))
    # The 31 s are the case itself, not a guess at the machine's speed: the wait ends at once
    # if the call does (answered or failed).
    done, _ = await asyncio.wait({pending}, timeout=31)
    assert not done, pending.result()
    await started.start_allocator()
    assert (await pending)[c].error == ""
    assert cdi_env(started, c)
    await plugin.close()


@pytest.mark.parametrize("call", ["prepare", "unprepare"])
async def test_an_allocator_silent_past_the_deadline_fails_unavailable(
    started: Node, call: str
) -> None:
    """The plugin answers before the kubelet's deadline, UNAVAILABLE (try again, not a
    conflict), in one line naming the allocator and how long it waited."""
    plugin = await register(started)
    c = uid()
    started.write_claim(claim("late", c, [result("cpudevnuma000", cpus=2)]))
    started.stop("allocator", signal.SIGKILL)
    ref = [Claim("default", "late", c)]
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        if call == "prepare":
            await plugin.prepare(ref, timeout=4)
        else:
            await plugin.unprepare(ref, timeout=4)
    assert failure.value.code() == grpc.StatusCode.UNAVAILABLE, failure.value
    detail = failure.value.details() or ""
    assert "\n" not in detail
    assert f"allocator at {started.sock('allocator')} did not answer in " in detail, detail
    waited = float(detail.split(" did not answer in ")[1].split(" s")[0])
    assert 0 < waited < 4, detail
    # Back, the kubelet's next try succeeds.
    await started.start_allocator()
    if call == "prepare":
        assert (await plugin.prepare(ref))[c].error == ""
    else:
        assert await plugin.unprepare(ref) == {c: ""}
    await plugin.close()


async def test_machine_mode_takes_the_cpuset_from_the_opaque_config(node: Node) -> None:
    node.configure(groupBy="machine", allocator="external")
    await node.start()
    plugin = await register(node)
    good, missing, from_class = uid(), uid(), uid()

    def opaque(cpuset: str, source: str = "FromClaim") -> list[dict[str, object]]:
        return [
            {
                "source": source,
                "requests": ["cpus"],
                "opaque": {
                    "driver": "dra.cpu",
                    "parameters": {"apiVersion": "v1alpha1", "cpuConfig": {"cpuset": cpuset}},
                },
            }
        ]

    node.write_claim(claim("pinned", good, [result("cpudevmachine", cpus=4)], config=opaque("4-7")))
    node.write_claim(claim("no-config", missing, [result("cpudevmachine", cpus=2)]))
    node.write_claim(
        claim(
            "class",
            from_class,
            [result("cpudevmachine", cpus=2)],
            config=opaque("8-9", "FromClass"),
        )
    )
    answer = await plugin.prepare(
        [
            Claim("default", "pinned", good),
            Claim("default", "no-config", missing),
            Claim("default", "class", from_class),
        ]
    )
    assert answer[good].error == ""
    assert cdi_env(node, good) == "4-7"
    assert "configuration" in answer[missing].error or "config" in answer[missing].error
    assert answer[from_class].error != ""
    await plugin.close()


async def test_health_reports_every_published_device_healthy(node: Node) -> None:
    await node.start_topology()
    await node.start_allocator()
    await node.start_plugin("--health-interval", "0.3")
    plugin = await register(node)

    for version in ("v1", "v1alpha1"):
        stream = plugin.watch_health(version=version)
        snapshots = []
        async for snapshot in stream:
            if snapshot:
                snapshots.append(snapshot)
            if len(snapshots) == 2:
                break
        await stream.aclose()
        for snapshot in snapshots:
            assert sorted(e.device for e in snapshot) == ["cpudevnuma000", "cpudevnuma001"]
            assert {(e.pool, e.health, e.lease_seconds) for e in snapshot} == {(NODE, "HEALTHY", 1)}
        assert snapshots[1][0].last_updated >= snapshots[0][0].last_updated
    await plugin.close()


async def test_default_health_lease_is_twenty_seconds(started: Node) -> None:
    plugin = await register(started)

    async def first_nonempty() -> list[object]:
        stream = plugin.watch_health()
        async for snapshot in stream:
            await stream.aclose()
            return snapshot  # type: ignore[return-value]
        return []

    snapshot = await eventually(first_nonempty, "a health snapshot with devices")
    assert {e.lease_seconds for e in snapshot} == {20}
    await plugin.close()


async def test_rejected_plugin_keeps_serving_and_says_why(node: Node) -> None:
    await node.start_topology()
    await node.start_allocator()
    await node.start_plugin("--registration-timeout", "0.5")
    with pytest.raises(PluginRejected):
        await KubeletSim(node.kubelet_root).register("dra.cpu", reject="version skew test")

    async def warned() -> bool:
        text = node.log("plugin").read_text()
        return "has not registered the plugin" in text and "version skew test" in text

    await eventually(warned, "the registration watchdog warning")
    line = next(
        x for x in klog_lines(node.log("plugin").read_text()) if "has not registered" in x.msg
    )
    assert line.values["registrar_dir"] == f"{node.kubelet_root}/plugins_registry/dra.cpu"
    view = await status(node)
    assert (view.registered, view.registration_error) == (False, "version skew test")
    assert await registration_health(node) == "NOT_SERVING"
    assert await rpc.check_health(node.sock("plugin")) == "SERVING"
    # The kubelet retries later and succeeds; the plugin was never down.
    plugin = await register(node)
    assert plugin.dra_version == "v1"

    async def registered() -> bool:
        return (await status(node)).registered

    await eventually(registered, "registration after a rejection")
    await plugin.close()


async def test_stale_sockets_are_replaced(node: Node) -> None:
    registrar = node.kubelet_root / "plugins_registry/dra.cpu"
    plugin_dir = node.kubelet_root / "plugins/dra.cpu"
    registrar.mkdir(parents=True)
    plugin_dir.mkdir(parents=True)
    for left_over in (registrar / "dra.cpu-reg.sock", plugin_dir / "dra.sock"):
        # A socket of a process that died: bound, never removed. (A regular file at a socket
        # path is refused instead, never deleted: tests/security.)
        with socket.socket(socket.AF_UNIX) as stale:
            stale.bind(str(left_over))
    await node.start()
    plugin = await register(node)
    assert plugin.dra_version == "v1"
    node.stop("plugin")
    assert not (registrar / "dra.cpu-reg.sock").exists()
    await plugin.close()


def test_kubelet_root_too_long_is_refused_with_the_budget(tmp_path: Path) -> None:
    root = "/tmp/" + "k" * 90
    run = subprocess.run(
        [str(BIN / "dracpu-dra-plugin"), "--kubelet-root-dir", root,
         "--kubeconfig", str(tmp_path / "kc"), "--socket", str(tmp_path / "p.sock")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    budget = 107 - len("/plugins_registry/dra.cpu/dra.cpu-reg.sock")
    assert f"may use at most {budget} bytes and uses 95" in lines[0]
    assert "Traceback" not in run.stderr


def test_introspect_metrics_describes_every_metric() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "dracpu.core.cli", "introspect", "metrics"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    described = json.loads(run.stdout)
    names = {m["name"] for m in described}
    assert names == {
        "dra_cpu_allocated_cpus",
        "dra_cpu_available_cpus",
        "dra_cpu_draining_cpus",
        "dra_cpu_reserved_cpus",
        "dra_cpu_resource_claims_active",
        "dra_cpu_resource_claims_memory_placed",
        "dra_cpu_memory_claimed_bytes",
        "dra_cpu_memory_free_bytes",
        "dra_cpu_prepare_claims_total",
        "dra_cpu_unprepare_claims_total",
        "dra_cpu_prepare_claim_duration_seconds",
        "dra_cpu_claim_allocated_cpus",
        "dra_cpu_api_feature_missing",
        "dra_cpu_claim_status_writes_total",
        "dra_cpu_claim_status_pending",
        "dra_cpu_nri_shared_updates_total",
        "dra_cpu_nri_shared_pending_containers",
        "dra_cpu_nri_update_cost_seconds",
        "dra_cpu_nri_runtime_disconnects_total",
        "dra_cpu_nri_unpinned_window_seconds",
        "dra_cpu_nri_repinned_containers_total",
        "dra_cpu_nri_late_pins_total",
        "dra_cpu_nri_adopted_containers_total",
        "dra_cpu_nri_updates_kept_total",
        "dra_cpu_devices",
        "dra_cpu_device_unhealthy",
        "dra_cpu_loop_restarts_total",
    }
    by_name = {m["name"]: m for m in described}
    assert by_name["dra_cpu_prepare_claims_total"]["labels"] == ["result"]
    assert by_name["dra_cpu_loop_restarts_total"]["labels"] == ["service", "loop"]
    assert by_name["dra_cpu_prepare_claim_duration_seconds"]["type"] == "histogram"
    bad = subprocess.run(
        [sys.executable, "-m", "dracpu.core.cli", "introspect", "nothing"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


async def test_kubelet_without_a_common_version_rejects_and_the_plugin_records_it(
    started: Node,
) -> None:
    old_kubelet = KubeletSim(started.kubelet_root, dra_services=("v1alpha4.Node",))
    with pytest.raises(PluginRejected, match="none of services supported by the plugin"):
        await old_kubelet.register("dra.cpu", timeout=10)
    view = await status(started)
    assert not view.registered
    assert view.registration_error.startswith(
        'none of services supported by the plugin (["v1.DRAPlugin", "v1beta1.DRAPlugin"'
    )


async def test_watchdog_when_no_kubelet_ever_calls(node: Node) -> None:
    await node.start_plugin("--registration-timeout", "0.3")

    async def warned() -> str:
        lines = node.log("plugin").read_text().splitlines()
        return next((x for x in lines if "has not registered the plugin within 0.3s" in x), "")

    line = await eventually(warned, "the watchdog warning")
    assert "the kubelet never contacted the plugin" in line
    parsed = parse_klog(line)
    assert parsed.values["registrar_dir"] == f"{node.kubelet_root}/plugins_registry/dra.cpu"
    assert await rpc.check_health(node.sock("plugin")) == "SERVING"
