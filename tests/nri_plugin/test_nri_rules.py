"""Pure rules of the nri-plugin: the DRA env format, when unsolicited updates are safe, the
event mask, plugin identity, and the container registry."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dracpu.core.containers import Container
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import ConfigError, InvalidInputError
from dracpu.nri_plugin.state.claim_env import parse_claim_env
from dracpu.nri_plugin.state.registry import ContainerRecord, Registry
from dracpu.nri_plugin.transport.compat import UnsolicitedMode, decide, parse_version
from dracpu.nri_plugin.transport.event_masks import (
    SUBSCRIBED_EVENTS,
    VALID_MASK_BEFORE_V0_10,
    valid_plugin_index,
    valid_plugin_name,
)

UID_A = "2f0b1c1e-1111-4000-8000-00000000000a"
UID_B = "2f0b1c1e-1111-4000-8000-00000000000b"


@pytest.mark.parametrize(
    ("env", "claims"),
    [
        pytest.param([], {}, id="no-env"),
        pytest.param(["PATH=/bin", "DRA=1", "DRA_CPU=2"], {}, id="unrelated"),
        pytest.param([f"DRA_CPUSET_{UID_A}=2-3"], {UID_A: "2-3"}, id="one-claim"),
        pytest.param(
            [f"DRA_CPUSET_{UID_A}=2,3", f"DRA_CPUSET_{UID_B}=8-9,12"],
            {UID_A: "2-3", UID_B: "8-9,12"},
            id="two-claims",
        ),
        pytest.param(["DRA_CPUSETX=1", "DRA_CPUSET=1"], {}, id="key-not-a-claim"),
    ],
)
def test_claim_env_parsing(env: list[str], claims: dict[str, str]) -> None:
    assert parse_claim_env(env) == {k: CPUSet.parse(v) for k, v in claims.items()}


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        pytest.param(f"DRA_CPUSET_{UID_A}", "no '='", id="no-equals"),
        pytest.param(f"DRA_CPUSET_{UID_A}=", "empty cpuset", id="empty"),
        pytest.param(f"DRA_CPUSET_{UID_A}=3-1", "reversed range", id="reversed"),
        pytest.param(f"DRA_CPUSET_{UID_A}=a,b", "invalid item", id="letters"),
        pytest.param("DRA_CPUSET", "no '='", id="bare-prefix"),
    ],
)
def test_malformed_claim_env_is_refused(entry: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        parse_claim_env(["PATH=/bin", entry])


@given(st.dictionaries(st.uuids().map(str), st.frozensets(st.integers(0, 255), min_size=1)))
def test_claim_env_round_trips(claims: dict[str, frozenset[int]]) -> None:
    env = [f"DRA_CPUSET_{uid}={CPUSet(cpus).format()}" for uid, cpus in claims.items()]
    assert parse_claim_env(env) == {uid: CPUSet(cpus) for uid, cpus in claims.items()}


# The compatibility table of docs/user/installation.md, as a specification.
@pytest.mark.parametrize(
    ("mode", "name", "version", "nri", "enabled"),
    [
        pytest.param("auto", "containerd", "v2.4.0", "v0.12.3", True, id="containerd-2.4"),
        pytest.param("auto", "containerd", "v2.4.0", "", True, id="containerd-2.4-no-nri"),
        pytest.param("auto", "containerd", "v2.3.2", "", False, id="containerd-2.3"),
        pytest.param("auto", "containerd", "v2.3.2", "v0.12.1", True, id="2.3-reporting-0.12.1"),
        pytest.param("auto", "containerd", "v2.3.0", "v0.12.0", False, id="nri-0.12.0"),
        pytest.param("auto", "containerd", "v2.0.0", "", False, id="containerd-2.0"),
        pytest.param("auto", "containerd", "v2.4.0-rc.1", "", False, id="2.4-rc"),
        pytest.param("auto", "containerd", "1.7.27", "", False, id="containerd-1.7"),
        pytest.param("auto", "cri-o", "1.35.0", "", False, id="crio-1.35"),
        pytest.param("auto", "cri-o", "1.36.0", "v0.12.5", True, id="crio-reporting-0.12.5"),
        pytest.param("auto", "mystery", "9.9.9", "", False, id="unknown-runtime"),
        pytest.param("auto", "containerd", "weird", "", False, id="bad-version"),
        pytest.param("auto", "containerd", "v2.4.1", "0.0.0-unknown", True, id="nri-unknown"),
        pytest.param(
            "auto", "containerd", "v2.3.0", "v0.12.1-0.20260718-84180b63351d", False, id="pseudo"
        ),
        pytest.param("on", "containerd", "v2.0.0", "", True, id="forced-on"),
        pytest.param("off", "containerd", "v2.4.0", "v0.12.5", False, id="forced-off"),
    ],
)
def test_unsolicited_updates_decision(
    mode: str, name: str, version: str, nri: str, enabled: bool
) -> None:
    decision = decide(UnsolicitedMode.parse(mode), name, version, nri)
    assert decision.enabled is enabled, decision.reason
    assert decision.reason


def test_unsolicited_mode_flag_value_is_checked() -> None:
    with pytest.raises(ConfigError, match="auto, on or off"):
        UnsolicitedMode.parse("sometimes")


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("v2.4.0", (2, 4, 0)),
        ("1.35", (1, 35, 0)),
        ("1.34.1+dev", (1, 34, 1)),
        ("v2.2.0-225-ge9dc15b7a", (2, 2, 0)),
        ("v2.4.0-rc.1", (2, 3, 9999)),
        ("v0.12.1-0.20260718221210-84180b63351d", (0, 12, 0)),
        ("", None),
        ("latest", None),
    ],
)
def test_version_parsing(text: str, version: tuple[int, int, int] | None) -> None:
    assert parse_version(text) == version


def test_subscription_is_valid_on_every_nri_version() -> None:
    assert SUBSCRIBED_EVENTS == 0x6C8
    assert SUBSCRIBED_EVENTS & ~VALID_MASK_BEFORE_V0_10 == 0


@pytest.mark.parametrize(
    ("name", "ok"), [("dra.cpu", True), ("a-b_c+d", True), ("", False), ("dra cpu", False)]
)
def test_plugin_names(name: str, ok: bool) -> None:
    assert valid_plugin_name(name) is ok


@pytest.mark.parametrize(("index", "ok"), [("00", True), ("99", True), ("0", False), ("x1", False)])
def test_plugin_indexes(index: str, ok: bool) -> None:
    assert valid_plugin_index(index) is ok


def _rec(cid: str, claims: tuple[str, ...] = (), cpus: str = "", pod: str = "p") -> ContainerRecord:
    return ContainerRecord(Container.of(cid, pod, "ns", "pod", cid), claims, CPUSet.parse(cpus))


def claim_owners(registry: Registry) -> dict[str, str]:
    """Claim UID -> container id, for every exclusive container."""
    return {claim: r.container_id for r in registry for claim in r.claims}


def test_registry_finds_stale_shared_containers_and_no_confirmed_claimed_one() -> None:
    registry = Registry([_rec("a", cpus="0-7"), _rec("b", (UID_A,), "2-3"), _rec("c", cpus="4-7")])
    pool = CPUSet.parse("4-7")
    assert [r.container_id for r in registry.stale(pool)] == ["a"]
    assert registry.stale(pool, exclude="a") == []
    assert claim_owners(registry) == {UID_A: "b"}


def test_registry_a_claimed_container_not_confirmed_on_its_cpus_is_stale_for_every_pool() -> None:
    registry = Registry([_rec("a", cpus="0-1"), _rec("b", (UID_A,), "2-3")])
    assert registry.set_cpus("b", CPUSet.parse("2-3"), confirmed=False)
    for pool in ("0-1", "4-7", ""):
        assert [r.container_id for r in registry.stale(CPUSet.parse(pool)) if r.claims] == ["b"]
    assert [r.container_id for r in registry.stale(CPUSet.parse("0-1"))] == ["b"]
    assert registry.stale(CPUSet.parse("0-1"), exclude="b") == []
    record = registry.get("b")
    assert record is not None and record.target(CPUSet.parse("0-1")) == CPUSet.parse("2-3")
    assert registry.set_cpus("b", CPUSet.parse("2-3"))
    assert registry.stale(CPUSet.parse("0-1")) == []
    assert registry.set_cpus("b", CPUSet.parse("2-3"), confirmed=False)
    assert registry.remove("b") is not None
    assert registry.stale(CPUSet.parse("0-1")) == []


def test_registry_ignores_a_removal_from_another_pod() -> None:
    registry = Registry([_rec("a", pod="p1")])
    assert registry.remove("a", pod_uid="p2") is None
    assert registry.remove("a", pod_uid="p1") is not None
    assert len(registry) == 0


def test_registry_records_cpus_only_if_unchanged_meanwhile() -> None:
    registry = Registry([_rec("a", cpus="0-7")])
    assert not registry.set_cpus("a", CPUSet.parse("1"), expected=_rec("a", cpus="0-3"))
    assert registry.set_cpus("a", CPUSet.parse("1"), expected=_rec("a", cpus="0-7"))
    record = registry.get("a")
    assert record is not None and record.cpus == CPUSet.parse("1")


def test_registry_an_unconfirmed_update_is_stale_for_every_pool() -> None:
    registry = Registry([_rec("a", cpus="0-7"), _rec("b", cpus="0-7")])
    assert registry.set_cpus("a", CPUSet.parse("4-7"), confirmed=False)
    for pool in ("0-7", "4-7"):
        stale = registry.stale(CPUSet.parse(pool))
        assert "a" in [r.container_id for r in stale], pool
    assert [r.container_id for r in registry.stale(CPUSet.parse("0-7"))] == ["a"]
    assert registry.set_cpus("a", CPUSet.parse("0-7"))
    assert registry.stale(CPUSet.parse("0-7")) == []


def test_an_update_carries_mems_only_when_there_are_memory_nodes() -> None:
    from dracpu.nri_plugin.state.conversions import cpuset_update

    placed = cpuset_update("c1", CPUSet.parse("2-3"), CPUSet.parse("0-1"))
    assert (placed.linux.resources.cpu.cpus, placed.linux.resources.cpu.mems) == ("2-3", "0-1")
    plain = cpuset_update("c2", CPUSet.parse("2-3"))
    assert plain.linux.resources.cpu.mems == ""  # "" leaves the container's memory nodes


def test_hugepage_limits_are_spelled_as_runc_takes_them() -> None:
    from dracpu.nri_plugin.state.conversions import hugepage_limits

    limits = hugepage_limits({"2Mi": 64 << 20, "1Gi": 1 << 30, "64Ki": 1 << 20, "2Xi": 1})
    # In size-name order; a size the plugin cannot spell is left out (logged), never guessed.
    assert [(limit.page_size, limit.limit) for limit in limits] == [
        ("1GB", 1 << 30),
        ("2MB", 64 << 20),
        ("64KB", 1 << 20),
    ]
    assert hugepage_limits({}) == []


def test_garbled_memory_nodes_from_the_allocator_leave_mems_unset() -> None:
    from dracpu.nri_plugin.state.conversions import memory_nodes

    assert memory_nodes("0-1", "c1") == CPUSet.parse("0-1")
    assert memory_nodes("", "c1") == CPUSet()
    assert memory_nodes("1-x", "c1") == CPUSet()


@pytest.mark.parametrize(
    ("name", "labels", "annotations", "expected"),
    [
        ("app", {}, {}, "app"),
        ("", {"io.kubernetes.container.name": "app"}, {}, "app"),
        # CRI-O 1.34 leaves the NRI name empty unless an annotation carries it; it always keeps
        # the CRI metadata it was created with.
        ("", {}, {"io.kubernetes.cri-o.Metadata": '{"name":"app","attempt":0}'}, "app"),
        ("", {}, {"io.kubernetes.cri-o.Metadata": "not json"}, ""),
        ("", {}, {}, ""),
    ],
    ids=["nri-name", "kubelet-label", "crio-metadata", "garbled-metadata", "nothing"],
)
def test_a_container_is_named_by_nri_else_the_kubelet_label_else_crio_metadata(
    name: str, labels: dict[str, str], annotations: dict[str, str], expected: str
) -> None:
    from dracpu.nri_plugin.state.conversions import container_name
    from dracpu.pb.nri import api_pb2

    ctr = api_pb2.Container(id="c1", name=name, labels=labels, annotations=annotations)
    assert container_name(ctr) == expected
