"""What the nri-plugin judges of the runtime: NRI (it registers on the runtime's socket) and
CDI injection (a claimed container carries its DRA_CPUSET_<claimUID>). A missing one is one
line naming it and the runtime setting that turns it on, in the log and the plugin's status,
once; a runtime that has both changes nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from harness.nri_bed import Bed, claim_env, prepare_seen
from harness.waits import eventually, never

from dracpu.core.errors import InvalidInputError
from dracpu.core.prerequisites import CDI, NRI, Prerequisite, Prerequisites
from dracpu.core.retry import Backoff
from dracpu.nri_plugin.cpu_plugin import CPUPlugin
from dracpu.nri_plugin.runtime import runtime_identity
from dracpu.nri_plugin.servicer import NRIPluginView
from dracpu.nri_plugin.transport.compat import UnsolicitedMode
from dracpu.nri_plugin.transport.cri_version import RuntimeIdentity, decode_version_response
from dracpu.nri_plugin.transport.runtime_prerequisites import RuntimePrerequisites, nri_off_line
from dracpu.nri_plugin.transport.stub import PluginStub
from dracpu.pb.allocator.v1 import allocator_pb2
from dracpu.pb.nri import api_pb2
from dracpu.pb.nri_plugin.v1 import nri_plugin_pb2

UID = "7d3c2a10-0000-4000-8000-000000000001"
CONTAINERD_NRI = 'disable = false under [plugins."io.containerd.nri.v1.nri"]'
CRIO_NRI = "enable_nri = true"
CONTAINERD_CDI = 'enable_cdi = true under [plugins."io.containerd.grpc.v1.cri"]'


def _checks(grace: float = 30.0) -> tuple[RuntimePrerequisites, Prerequisites]:
    verdicts = Prerequisites()
    return RuntimePrerequisites(verdicts, "/var/run/nri/nri.sock", grace=grace), verdicts


def _state(verdicts: Prerequisites) -> dict[str, bool]:
    return {p.name: p.ok for p in verdicts.all()}


# ---- NRI ------------------------------------------------------------------------------------


def test_a_runtime_without_nri_is_named_with_the_setting_of_each_runtime() -> None:
    checks, verdicts = _checks()
    checks.connection_failed("cannot connect to /var/run/nri/nri.sock: No such file or directory")
    (verdict,) = verdicts.all()
    assert (verdict.name, verdict.ok) == (NRI, False)
    for words in (CONTAINERD_NRI, CRIO_NRI, "No such file or directory", "--nri-socket"):
        assert words in verdict.message
    assert "\n" not in verdict.message
    checks.registered()
    assert _state(verdicts) == {NRI: True}


def test_a_runtime_restart_within_the_grace_is_not_a_missing_nri() -> None:
    checks, verdicts = _checks(grace=3600.0)
    checks.registered()
    checks.connection_failed("cannot connect to /var/run/nri/nri.sock: Connection refused")
    assert _state(verdicts) == {NRI: True}
    checks.grace = 0.0
    checks.connection_failed("cannot connect to /var/run/nri/nri.sock: Connection refused")
    assert _state(verdicts) == {NRI: False}


async def test_the_stub_reports_an_absent_socket_once_in_the_status(tmp_path: Path) -> None:
    class Allocator:
        async def shared_pool(self) -> allocator_pb2.SharedPool:
            return allocator_pb2.SharedPool(cpus="0-3", generation=1)

    changes: list[Prerequisite] = []
    verdicts = Prerequisites(on_change=changes.append)
    checks = RuntimePrerequisites(verdicts, "/var/run/nri/nri.sock")
    attempts: list[str] = []  # every failed connection the stub reports
    report = checks.connection_failed

    def counted(reason: str) -> None:
        attempts.append(reason)
        report(reason)

    checks.connection_failed = counted  # type: ignore[method-assign]
    plugin = CPUPlugin(Allocator(), unsolicited=UnsolicitedMode.OFF,  # type: ignore[arg-type]
                       prerequisites=checks)  # fmt: skip
    stub = PluginStub(str(tmp_path / "nri.sock"), plugin, prerequisites=checks,
                      backoff=Backoff(initial=0.01, maximum=0.01))  # fmt: skip
    task = asyncio.create_task(stub.run())
    try:
        await eventually(lambda: stub.status.connects == 0 and verdicts.get(NRI), "a verdict")
        # Several more attempts fail the same way: the same words, no new verdict.
        seen = len(attempts)
        await never(lambda: changes[1:], "a new verdict", until=lambda: len(attempts) >= seen + 3)
    finally:
        stub.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    status = await NRIPluginView(plugin, stub).GetStatus(nri_plugin_pb2.GetStatusRequest(), None)
    (shown,) = status.prerequisites
    assert (shown.name, shown.ok) == (NRI, False)
    assert "No such file or directory" in shown.message


# ---- CDI ------------------------------------------------------------------------------------


def _container(env: list[str], cdi: list[str]) -> api_pb2.Container:
    return api_pb2.Container(
        name="app", env=env, CDI_devices=[api_pb2.CDIDevice(name=d) for d in cdi]
    )


CLAIMED = {UID: object()}


@pytest.mark.parametrize(
    ("env", "cdi", "claims", "verdict"),
    [
        pytest.param([f"DRA_CPUSET_{UID}=2-3"], [f"dra.k8s.io/cpu=claim-{UID}"], CLAIMED, True,
                     id="claim-injected"),
        pytest.param(["PATH=/bin"], [f"dra.k8s.io/cpu=claim-{UID}"], {}, False,
                     id="claim-asked-not-injected"),
        pytest.param(["PATH=/bin"], [], {}, None, id="unclaimed-container"),
        pytest.param(["PATH=/bin"], ["nvidia.com/gpu=0"], {}, None, id="another-drivers-device"),
    ],
)  # fmt: skip
def test_cdi_is_judged_on_claimed_containers(
    env: list[str], cdi: list[str], claims: dict[str, object], verdict: bool | None
) -> None:
    checks, verdicts = _checks()
    checks.container_seen("default/db/app", claims, _container(env, cdi))
    assert _state(verdicts).get(CDI) is verdict
    if verdict is False:
        message = verdicts.all()[0].message
        assert CONTAINERD_CDI in message and f"DRA_CPUSET_{UID}" in message
        assert "default/db/app" in message


def test_a_missing_cdi_is_said_once_and_its_return_too() -> None:
    checks, verdicts = _checks()
    asked = [f"dra.k8s.io/cpu=claim-{UID}"]
    checks.container_seen("default/a/app", {}, _container([], asked))
    first = verdicts.get(CDI)
    checks.container_seen("default/b/app", {}, _container([], asked))
    assert verdicts.get(CDI) == first  # the first container's words stand
    checks.container_seen("default/c/app", CLAIMED, _container([f"DRA_CPUSET_{UID}=1"], asked))
    assert _state(verdicts) == {CDI: True}


async def test_through_the_runtime_a_claim_without_its_env_is_reported_and_runs_shared(
    bed: Bed,
) -> None:
    checks, verdicts = _checks()
    bed.plugin.state.prerequisites = checks
    uid, cpus = await prepare_seen(bed, 2)
    pod = bed.runtime.add_pod("db")
    cid = await bed.runtime.create_container(
        pod, "postgres", ["PATH=/bin"], cdi_devices=[f"dra.k8s.io/cpu=claim-{uid}"]
    )
    assert _state(verdicts) == {CDI: False}
    assert bed.runtime.cpus(cid) == (await bed.allocator.shared()).format()
    other = bed.runtime.add_pod("web")
    await bed.runtime.create_container(other, "app", claim_env((uid, cpus)),
                                       cdi_devices=[f"dra.k8s.io/cpu=claim-{uid}"])  # fmt: skip
    assert _state(verdicts) == {CDI: True}


async def test_a_claimed_container_found_at_synchronize_shows_cdi_works(bed: Bed) -> None:
    uid, cpus = await prepare_seen(bed, 2)
    pod = bed.runtime.add_pod("db")
    await bed.runtime.create_container(pod, "postgres", claim_env((uid, cpus)))
    checks, verdicts = _checks()
    bed.plugin.state.prerequisites = checks  # as a plugin started after the container
    connects = bed.stub.status.connects
    await bed.runtime.restart()
    await eventually(lambda: bed.stub.status.connects > connects, "reconnect", timeout=10)
    await eventually(lambda: _state(verdicts) == {CDI: True}, "the verdict", timeout=10)


# ---- the runtime named by its CRI socket when NRI is off ------------------------------------


def _string_field(number: int, value: str) -> bytes:
    data = value.encode()
    return bytes([number << 3 | 2, len(data)]) + data


def _version_reply(name: str, version: str) -> bytes:
    """A VersionResponse as the runtime serializes it: version, runtime_name, runtime_version,
    runtime_api_version (fields 1-4, strings)."""
    return b"".join(
        _string_field(n, v) for n, v in ((1, "0.1.0"), (2, name), (3, version), (4, "v1"))
    )


def test_the_cri_version_reply_names_the_runtime_and_its_version() -> None:
    crio = decode_version_response(_version_reply("cri-o", "1.34.0"))
    assert (crio.name, crio.version, crio.kind, str(crio)) == ("cri-o", "1.34.0", "crio",
                                                               "CRI-O 1.34.0")  # fmt: skip
    containerd = decode_version_response(_version_reply("containerd", "v2.4.2"))
    assert (containerd.kind, str(containerd)) == ("containerd", "containerd v2.4.2")
    # an unknown field of another wire type is stepped over
    assert decode_version_response(b"\x28\x07" + _version_reply("x", "1")).name == "x"
    for garbled in (b"\x12\x09cri", b"\x0a\x02v1", b"\xff"):
        with pytest.raises(InvalidInputError, match="CRI VersionResponse"):
            decode_version_response(garbled)


def test_a_crio_without_nri_is_one_line_naming_it_its_version_and_the_setting() -> None:
    line = nri_off_line("/var/run/nri/nri.sock", RuntimeIdentity("cri-o", "1.34.0"))
    assert line.startswith("no NRI socket at /var/run/nri/nri.sock: CRI-O 1.34.0 has NRI off"), line
    assert "enable_nri = true under [crio.nri]" in line
    assert CONTAINERD_NRI not in line and "\n" not in line
    line = nri_off_line("/run/nri.sock", RuntimeIdentity("containerd", "1.7.27"))
    assert "containerd 1.7.27 has NRI off" in line and CONTAINERD_NRI in line
    assert CRIO_NRI not in line
    # Unnamed: why, and the setting of each runtime.
    line = nri_off_line("/run/nri.sock", None, "no --cri-socket to ask its name and version")
    assert "the runtime has NRI off (no --cri-socket" in line
    assert CONTAINERD_NRI in line and CRIO_NRI in line


def test_the_status_names_the_runtime_the_cri_socket_named() -> None:
    checks, verdicts = _checks()
    checks.runtime = RuntimeIdentity("cri-o", "1.34.0")
    checks.connection_failed("cannot connect to /var/run/nri/nri.sock: No such file or directory")
    (verdict,) = verdicts.all()
    assert "no NRI connection to CRI-O 1.34.0" in verdict.message
    assert "enable_nri = true under [crio.nri]" in verdict.message
    assert CONTAINERD_NRI not in verdict.message


async def test_the_cri_socket_is_asked_its_version_and_an_absent_one_said(tmp_path: Path) -> None:
    socket = tmp_path / "cri.sock"

    async def version(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return _version_reply("cri-o", "1.34.0")

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "runtime.v1.RuntimeService",
                {"Version": grpc.unary_unary_rpc_method_handler(version)},
            )
        ]
    )
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    try:
        assert await runtime_identity(str(socket)) == (RuntimeIdentity("cri-o", "1.34.0"), "")
    finally:
        await server.stop(None)
    named, why = await runtime_identity(str(tmp_path / "absent.sock"))
    assert named is None
    assert why == f"its CRI socket {tmp_path / 'absent.sock'} did not answer Version: UNAVAILABLE"
    assert await runtime_identity("") == (None, "no --cri-socket to ask its name and version")
