"""What the dra-plugin checks of the API server before it publishes: resource.k8s.io/v1 is
served, and the grouped devices' allowMultipleAllocations survives a write (the
DRAConsumableCapacity gate). A missing one is one log line naming it and how to turn it on,
a verdict in the plugin's status, an Event on the driver's pod, and no ResourceSlice at all;
on a good server nothing changes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from harness.dra_plugin_node import NODE, NODE_UID, Node
from harness.waits import eventually

from dracpu.core import rpc
from dracpu.core.errors import DracpuError, InvalidInputError, UnavailableError
from dracpu.core.prerequisites import (
    CONSUMABLE_CAPACITY,
    DEVICE_TAINTS,
    RESOURCE_API,
    Prerequisite,
    Prerequisites,
)
from dracpu.dev.apiserver import Store, fake_apiserver
from dracpu.dra_plugin.cluster.api_prerequisites import APIPrerequisites
from dracpu.dra_plugin.cluster.pod_events import MET, MISSING, PodEvents, PodIdentity
from dracpu.pb.dra_plugin.v1 import dra_plugin_pb2, dra_plugin_pb2_grpc

pytestmark = pytest.mark.timeout(120)

POD = PodIdentity("dra-driver-cpu-x7k2p", "kube-system", "5f1e7c1a-0000-4000-8000-000000000001")
GATE_FLAG = "--feature-gates=DRAConsumableCapacity=true"


# ---- the checks, against a stand-in server ---------------------------------------------------


@dataclass
class StandIn:
    """Answers the questions the checks ask, and counts them."""

    versions: list[str] | None = field(default_factory=lambda: ["v1beta2", "v1"])
    keeps_sharing: bool = True
    keeps_taints: bool = True
    refusal: DracpuError | None = None
    unreachable: bool = False
    calls: list[str] = field(default_factory=list)

    async def group_versions(self, group: str) -> list[str] | None:
        self.calls.append("discovery")
        if self.unreachable:
            raise UnavailableError("discover API group resource.k8s.io: connection refused")
        return self.versions

    async def dry_run_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("dry-run")
        if self.refusal is not None:
            raise self.refusal
        device = dict(obj["spec"]["devices"][0])
        if not self.keeps_sharing:
            device.pop("allowMultipleAllocations", None)
        if not self.keeps_taints:
            device.pop("taints", None)
        return {**obj, "spec": {**obj["spec"], "devices": [device]}}


def _checks(server: StandIn, recheck: float = 60.0) -> tuple[APIPrerequisites, Prerequisites]:
    verdicts = Prerequisites()
    return APIPrerequisites(server, verdicts, driver="dra.cpu", node=NODE,
                            recheck=recheck), verdicts  # fmt: skip


def _missing(verdicts: Prerequisites) -> dict[str, str]:
    return {p.name: p.message for p in verdicts.all() if not p.ok}


FORBIDDEN = UnavailableError(
    "dry-run create resourceslice: 403 Forbidden: resourceslices.resource.k8s.io is forbidden: "
    'User "nobody" cannot create resource "resourceslices" in API group "resource.k8s.io"'
)

REFUSED_FIELD = InvalidInputError(
    'dry-run create resourceslice: 422 Unprocessable Entity: ResourceSlice.resource.k8s.io "x" '
    "is invalid: spec.devices[0].allowMultipleAllocations: Forbidden: disabled by feature gate"
)


@pytest.mark.parametrize(
    ("server", "shared", "publish", "missing", "words"),
    [
        pytest.param(StandIn(), True, True, None, "", id="all-good-grouped"),
        pytest.param(StandIn(keeps_sharing=False), False, True, None, "",
                     id="individual-needs-no-sharing"),
        pytest.param(StandIn(keeps_sharing=False), True, False, CONSUMABLE_CAPACITY, GATE_FLAG,
                     id="gate-off-drops-the-field"),
        pytest.param(StandIn(versions=["v1beta1", "v1beta2"]), True, False, RESOURCE_API,
                     "serves resource.k8s.io v1beta1, v1beta2 but not v1",
                     id="only-beta-versions"),
        pytest.param(StandIn(versions=None), False, False, RESOURCE_API,
                     "does not serve resource.k8s.io at all", id="no-resource-group"),
        pytest.param(StandIn(refusal=FORBIDDEN), True, True, None, "",
                     id="dry-run-refused-decides-nothing"),
        pytest.param(StandIn(refusal=REFUSED_FIELD), True, False, CONSUMABLE_CAPACITY, GATE_FLAG,
                     id="field-refused-by-name"),
    ],
)  # fmt: skip
async def test_the_verdict_of_each_server(
    server: StandIn, shared: bool, publish: bool, missing: str | None, words: str
) -> None:
    checks, verdicts = _checks(server)
    assert await checks.satisfied(shared) is publish
    found = _missing(verdicts)
    assert list(found) == ([missing] if missing else [])
    if missing:
        assert words in found[missing]
        assert "no ResourceSlices are published until then" in found[missing]
        assert "\n" not in found[missing]


async def test_the_gate_message_names_the_flag_and_every_component_that_needs_it() -> None:
    checks, verdicts = _checks(StandIn(keeps_sharing=False))
    await checks.satisfied(True)
    message = _missing(verdicts)[CONSUMABLE_CAPACITY]
    for words in (GATE_FLAG, "kube-apiserver", "kube-scheduler", "kubelet", "individual"):
        assert words in message


async def test_an_unreachable_server_decides_nothing_and_is_asked_again() -> None:
    server = StandIn(unreachable=True)
    checks, verdicts = _checks(server, recheck=0.0)
    assert await checks.satisfied(True) is False
    assert verdicts.all() == []
    server.unreachable = False
    assert await checks.satisfied(True) is True
    assert [p.name for p in verdicts.all() if p.ok] == [
        CONSUMABLE_CAPACITY, DEVICE_TAINTS, RESOURCE_API
    ]  # fmt: skip


async def test_a_missing_gate_is_asked_again_only_after_the_recheck_interval() -> None:
    server = StandIn(keeps_sharing=False)
    checks, verdicts = _checks(server, recheck=3600.0)
    assert await checks.satisfied(True) is False
    asked = list(server.calls)
    server.keeps_sharing = True
    assert await checks.satisfied(True) is False  # not yet time to ask again
    assert server.calls == asked
    checks.recheck = 0.0
    checks._next_check = 0.0
    assert await checks.satisfied(True) is True
    assert _missing(verdicts) == {}
    calls = list(server.calls)
    assert await checks.satisfied(True) is True  # once all hold, the server is not asked
    assert server.calls == calls


@pytest.mark.parametrize("shared", [True, False], ids=["grouped", "individual"])
async def test_a_server_dropping_taints_is_said_once_and_publishing_goes_on(shared: bool) -> None:
    server = StandIn(keeps_taints=False)
    checks, verdicts = _checks(server, recheck=0.0)
    assert await checks.satisfied(shared) is True
    assert checks.taints_kept is False
    message = _missing(verdicts)[DEVICE_TAINTS]
    for words in (
        "drops device taints",
        "published without taints",
        "--feature-gates=DRADeviceTaints=true",
        "kube-apiserver",
        "kube-scheduler",
    ):
        assert words in message
    asked = len(server.calls)
    assert await checks.satisfied(shared) is True
    assert len(server.calls) == asked  # answered once: not asked again


async def test_the_taints_check_unanswered_holds_nothing_back_and_is_asked_again() -> None:
    server = StandIn()
    checks, verdicts = _checks(server, recheck=0.0)
    tainted_probe: list[bool] = []
    real_dry_run = server.dry_run_slice

    async def refusing(obj: dict[str, Any]) -> dict[str, Any]:
        tainted_probe.append("taints" in obj["spec"]["devices"][0])
        if tainted_probe[-1]:
            raise UnavailableError("dry-run create resourceslice: connection reset")
        return await real_dry_run(obj)

    server.dry_run_slice = refusing  # type: ignore[method-assign]
    assert await checks.satisfied(True) is True
    assert checks.taints_kept is None and verdicts.get(DEVICE_TAINTS) is None
    server.dry_run_slice = real_dry_run  # type: ignore[method-assign]
    assert await checks.satisfied(True) is True
    assert checks.taints_kept is True


# ---- Events on the pod -----------------------------------------------------------------------


@dataclass
class Sink:
    written: list[dict[str, Any]] = field(default_factory=list)
    refusal: DracpuError | None = None

    async def create_event(self, namespace: str, event: Any) -> dict[str, Any]:
        if self.refusal is not None:
            raise self.refusal
        self.written.append(dict(event))
        return dict(event)


def _verdict(ok: bool, message: str = "NRI is off") -> Prerequisite:
    return Prerequisite("NRI", ok, message, 0.0)


async def _drain(events: PodEvents) -> None:
    while not events._queue.empty():
        reason, message = events._queue.get_nowait()
        await events.write(reason, message)


async def test_each_change_of_a_verdict_is_one_event_on_the_pod() -> None:
    sink = Sink()
    events = PodEvents(sink, POD, NODE)
    events.report("nri-plugin", _verdict(True, "registered"))  # never missing: no news
    events.report("nri-plugin", _verdict(False))
    events.report("nri-plugin", _verdict(False))  # the same again: nothing
    events.report("nri-plugin", _verdict(True, "registered"))
    await _drain(events)
    assert [(e["type"], e["reason"]) for e in sink.written] == [
        ("Warning", MISSING), ("Normal", MET)
    ]  # fmt: skip
    first = sink.written[0]
    assert first["message"] == "nri-plugin: NRI: NRI is off"
    assert first["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": POD.name,
                                       "namespace": POD.namespace, "uid": POD.uid}  # fmt: skip
    assert first["metadata"]["namespace"] == POD.namespace
    assert first["metadata"]["name"].startswith(f"{POD.name}.")


async def test_without_a_pod_identity_no_event_is_written() -> None:
    assert PodIdentity.from_env({"POD_NAME": "p"}) is None
    assert PodIdentity.from_env({"POD_NAME": "p", "POD_NAMESPACE": "n"}) == PodIdentity("p", "n")
    sink = Sink()
    events = PodEvents(sink, None, NODE)
    events.report("dra-plugin", _verdict(False))
    await _drain(events)
    assert sink.written == []


# ---- the plugin process against a loopback API server ----------------------------------------


@pytest.fixture
def pod_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("POD_NAME", POD.name)
    monkeypatch.setenv("POD_NAMESPACE", POD.namespace)
    monkeypatch.setenv("POD_UID", POD.uid)
    yield


async def _status(node: Node) -> dra_plugin_pb2.PluginStatus:
    async with rpc.channel(node.sock("plugin")) as chan:
        stub = dra_plugin_pb2_grpc.DRAPluginViewStub(chan)
        reply: dra_plugin_pb2.PluginStatus = await stub.GetStatus(
            dra_plugin_pb2.GetStatusRequest(), timeout=10
        )
        return reply


async def _start_against(node: Node, store: Store, kubeconfig: Any) -> None:
    store.nodes[NODE] = {"apiVersion": "v1", "kind": "Node",
                         "metadata": {"name": NODE, "uid": NODE_UID}}  # fmt: skip
    await node.start_topology()
    await node.start_allocator()
    node.use_apiserver(kubeconfig)
    node._spawn(
        "plugin", node.plugin_argv("--nri-plugin-socket", str(node.root / "no-nri-plugin.sock"))
    )
    await node.wait_serving("plugin", node.sock("plugin"))


def _slices(store: Store) -> list[dict[str, Any]]:
    with store.lock:
        return [s for s in store.slices.values() if s["spec"]["driver"] == "dra.cpu"]


async def test_a_good_server_gets_the_slices_and_no_event(node: Node, pod_env: None) -> None:
    with fake_apiserver(node.root) as (store, kubeconfig):
        await _start_against(node, store, kubeconfig)
        found = await eventually(lambda: _slices(store), "slices in the API server")
        assert all(d["allowMultipleAllocations"] for s in found for d in s["spec"]["devices"])
        status = await _status(node)
        assert {(p.name, p.ok) for p in status.prerequisites} == {
            (RESOURCE_API, True), (CONSUMABLE_CAPACITY, True), (DEVICE_TAINTS, True)
        }  # fmt: skip
        assert store.pod_events == []
        with store.lock:  # each asked once: consumable capacity, taints
            assert sum("dryRun=All" in path for _, path in store.requests) == 2
        assert "prerequisite missing" not in node.log("plugin").read_text()


async def test_a_server_that_drops_the_shared_field_gets_no_slice(
    node: Node, pod_env: None
) -> None:
    with fake_apiserver(node.root) as (store, kubeconfig):
        store.drop_device_fields = {"allowMultipleAllocations"}
        await _start_against(node, store, kubeconfig)

        async def missing() -> dra_plugin_pb2.PluginStatus | None:
            status = await _status(node)
            return status if any(not p.ok for p in status.prerequisites) else None

        status = await eventually(missing, "the missing prerequisite in the status")
        (verdict,) = [p for p in status.prerequisites if not p.ok]
        assert verdict.name == CONSUMABLE_CAPACITY
        assert GATE_FLAG in verdict.message
        assert GATE_FLAG in status.last_publish_error
        await eventually(lambda: store.pod_events, "the Event on the driver's pod")
        (event,) = store.pod_events
        assert (event["type"], event["reason"]) == ("Warning", MISSING)
        assert event["involvedObject"]["uid"] == POD.uid
        assert event["message"].startswith(f"dra-plugin: {CONSUMABLE_CAPACITY}: ")
        assert _slices(store) == []
        with store.lock:
            assert not any(m in ("PUT", "DELETE") for m, _ in store.requests)
        lines = [line for line in node.log("plugin").read_text().splitlines()
                 if "prerequisite missing" in line]  # fmt: skip
        assert len(lines) == 1 and GATE_FLAG in lines[0]


async def test_a_server_that_drops_taints_gets_untainted_slices_and_one_event(
    node: Node, pod_env: None
) -> None:
    with fake_apiserver(node.root) as (store, kubeconfig):
        store.drop_device_fields = {"taints"}
        await _start_against(node, store, kubeconfig)
        await eventually(lambda: _slices(store), "slices in the API server")

        async def said() -> dra_plugin_pb2.PluginStatus | None:
            status = await _status(node)
            return status if status.missing_api_features else None

        status = await eventually(said, "the missing feature in the status")
        assert [(m.name, m.feature_gate) for m in status.missing_api_features] == [
            ("taints", "DRADeviceTaints")
        ]
        (verdict,) = [p for p in status.prerequisites if not p.ok]
        assert verdict.name == DEVICE_TAINTS and "published without taints" in verdict.message
        await eventually(lambda: store.pod_events, "the Event on the driver's pod")
        (event,) = store.pod_events
        assert (event["type"], event["reason"]) == ("Warning", MISSING)
        assert event["message"].startswith(f"dra-plugin: {DEVICE_TAINTS}: ")
        lines = [line for line in node.log("plugin").read_text().splitlines()
                 if "prerequisite missing" in line]  # fmt: skip
        assert len(lines) == 1


async def test_a_server_without_resource_v1_gets_no_slice(node: Node, pod_env: None) -> None:
    with fake_apiserver(node.root) as (store, kubeconfig):
        store.resource_versions = ["v1beta1", "v1beta2"]
        await _start_against(node, store, kubeconfig)
        await eventually(lambda: store.pod_events, "the Event on the driver's pod")
        assert store.pod_events[0]["message"].startswith(f"dra-plugin: {RESOURCE_API}: ")
        status = await _status(node)
        assert [(p.name, p.ok) for p in status.prerequisites] == [(RESOURCE_API, False)]
        assert _slices(store) == []


async def test_an_event_the_server_refuses_is_one_line_with_its_reason(
    node: Node, pod_env: None
) -> None:
    with fake_apiserver(node.root) as (store, kubeconfig):
        store.drop_device_fields = {"allowMultipleAllocations"}
        reason = (
            f'events is forbidden: User "system:serviceaccount:kube-system:x" cannot '
            f'create resource "events" in API group "" in the namespace "{POD.namespace}"'
        )
        store.refuse_events = (403, "Forbidden", reason)  # fmt: skip
        await _start_against(node, store, kubeconfig)

        def refused() -> str | None:
            text = node.log("plugin").read_text()
            return text if "event on the driver's pod not written" in text else None

        text = await eventually(refused, "the refused Event in the log")
        (line,) = [x for x in text.splitlines() if "event on the driver's pod not written" in x]
        assert "403 Forbidden" in line and "cannot create resource" in line
        assert "Traceback" not in text
        assert store.pod_events == []
