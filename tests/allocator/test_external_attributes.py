"""What an external allocator reads on grouped devices: `dra.cpu/cpuIDs` (the group's
allocatable CPUs) and `dra.cpu/smtLayout` (the node's sibling pairs, V1 encoding), published
only with `allocator: external`, exact to the byte, and refused whole when the API server
could not take them or V1 cannot say them."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from dataclasses import replace

import pytest
from harness.published import decode_smt_layout
from hypothesis import given, settings
from hypothesis import strategies as st

from dracpu.allocator.claims import ClaimRecord, NodeState
from dracpu.allocator.domain.devices import DeviceOptions, GroupBy, build_devices
from dracpu.allocator.domain.external import smt_layout
from dracpu.allocator.live.state import PublishedDevices
from dracpu.core import log
from dracpu.core.cpuset import CPUSet
from dracpu.core.driver import ATTR_CPU_IDS, ATTR_SMT_LAYOUT
from dracpu.core.errors import ConfigError
from dracpu.core.machine import CPUInfo, Machine
from dracpu.core.names import MAX_ATTRIBUTE_VALUE
from dracpu.topology.fixtures import FIXTURES

Machines = Callable[[str], Machine]


def machine_of(
    cores: list[tuple[int, ...]], numa_of: Callable[[int], int] = lambda _: 0
) -> Machine:
    """A machine from its cores' threads, in one socket."""
    cpus = [
        CPUInfo(cpu_id=cpu, core_id=index, socket_id=0, numa_node_id=numa_of(cpu))
        for index, threads in enumerate(cores)
        for cpu in threads
    ]
    return Machine.build(cpus)


def external(group_by: GroupBy, reserved: str = "") -> DeviceOptions:
    return DeviceOptions(group_by=group_by, allocator="external", reserved=CPUSet.parse(reserved))


# ---- the encoding -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cores", "layout"),
    [
        # The reference's example: stride 4, then stride 2, then the CPUs without a sibling.
        (
            [(0, 4), (1, 5), (2, 6), (3, 7), (8, 10), (9, 11), (12,), (13,), (14,), (15,)],
            "0-7>4;8-11>2;12-15",
        ),
        # Entries by their lowest CPU, whatever their stride.
        ([(0, 8), (1, 9), (10, 12), (11, 13)], "0-1,8-9>8;10-13>2"),
        ([(0, 2), (1, 3), (4, 8), (5, 9)], "0-3>2;4-5,8-9>4"),
        ([(0,), (1,), (2,), (3,)], "0-3"),
        ([(0, 1), (2, 3)], "0-3>1"),
        # Every sibling pair of one stride in one entry, however scattered.
        ([(0, 2), (1, 3), (4,), (5, 7), (6,)], "0-3,5,7>2;4,6"),
    ],
    ids=[
        "reference-example",
        "by-lowest-cpu",
        "by-lowest-cpu-2",
        "no-smt",
        "adjacent",
        "scattered",
    ],
)
def test_smt_layout_encoding(cores: list[tuple[int, ...]], layout: str) -> None:
    machine = machine_of(cores)
    assert smt_layout(machine, "cpudevnuma000") == layout
    pairs, alone = decode_smt_layout(layout)
    assert pairs == sorted(tuple(c) for c in cores if len(c) == 2)
    assert alone == CPUSet(c[0] for c in cores if len(c) == 1)


@st.composite
def two_way_cores(draw: st.DrawFn) -> list[tuple[int, ...]]:
    """Any node of cores with one or two threads, CPU numbers shuffled over 0..2n."""
    count = draw(st.integers(min_value=1, max_value=40))
    cpus = draw(st.permutations(list(range(2 * count))))
    cores: list[tuple[int, ...]] = []
    index = 0
    while index < len(cpus):
        if index + 1 < len(cpus) and draw(st.booleans()):
            cores.append(tuple(sorted(cpus[index : index + 2])))
            index += 2
        else:
            cores.append((cpus[index],))
            index += 1
    return cores


@settings(max_examples=200, deadline=None)
@given(two_way_cores())
def test_any_two_way_layout_decodes_to_its_pairs(cores: list[tuple[int, ...]]) -> None:
    layout = smt_layout(machine_of(cores), "cpudevnuma000")
    pairs, alone = decode_smt_layout(layout)
    assert pairs == sorted(c for c in cores if len(c) == 2)
    assert alone == CPUSet(c[0] for c in cores if len(c) == 1)
    entries = layout.split(";")
    strided = [e for e in entries if ">" in e]
    # Strided entries first, ordered by lowest CPU, one per stride; the single CPUs last.
    assert entries[: len(strided)] == strided
    lowest = [CPUSet.parse(e.partition(">")[0]).first() for e in strided]
    assert lowest == sorted(lowest)
    strides = [e.partition(">")[2] for e in strided]
    assert len(set(strides)) == len(strides)


# The node's layout on every fixture machine (None: V1 cannot express it).
FIXTURE_LAYOUTS: dict[str, str | None] = {
    "single-4c8t": "0-7>4",
    "xeon-2s-ht": "0-39>20",
    "epyc-2s-nps4": "0-255>128",
    "intel-hybrid": "0-15>1;16-23",
    "arm-clusters": "0-31",
    "smt4": None,
    "small-vm": "0-1",
    # CPUs 4, 5 and 9 offline: their siblings 12, 13 and 1 are alone.
    "offline-middle": "0,2-3,6-8,10-11,14-15>8;1,12-13",
    "snc": "0-63>32",
    "isolated-rt": "0-15>8",
    "isolated-2numa": "0-15>8",
    "isolated-all": "0-1",
    "big-1024": "0-1023>512",
    "numa4-hugepages": "0-31>16",
}


def test_every_fixture_has_an_expected_layout() -> None:
    assert set(FIXTURE_LAYOUTS) == set(FIXTURES)


@pytest.mark.parametrize("name", sorted(FIXTURE_LAYOUTS))
def test_fixture_layouts_round_trip(machines: Machines, name: str) -> None:
    machine = machines(name)
    expected = FIXTURE_LAYOUTS[name]
    if expected is None:
        with pytest.raises(ConfigError, match="covers 2-way SMT only"):
            smt_layout(machine, "cpudevmachine")
        return
    assert smt_layout(machine, "cpudevmachine") == expected
    pairs, alone = decode_smt_layout(expected)
    cores = list(machine.cores.values())
    assert pairs == sorted((t.sorted()[0], t.sorted()[1]) for t in cores if len(t) == 2)
    assert alone == CPUSet(t.first() for t in cores if len(t) == 1)
    assert CPUSet(c for p in pairs for c in p) | alone == machine.online


# ---- on the devices ---------------------------------------------------------------------------

# (fixture, grouping, reserved) -> every device's dra.cpu/cpuIDs.
CPU_IDS = [
    ("single-4c8t", "numanode", "", {"cpudevnuma000": "0-7"}),
    ("single-4c8t", "machine", "0,4", {"cpudevmachine": "1-3,5-7"}),
    (
        "xeon-2s-ht",
        "numanode",
        "0,20",
        {"cpudevnuma000": "1-9,21-29", "cpudevnuma001": "10-19,30-39"},
    ),
    (
        "xeon-2s-ht",
        "socket",
        "",
        {"cpudevsocket000": "0-9,20-29", "cpudevsocket001": "10-19,30-39"},
    ),
    (
        "epyc-2s-nps4",
        "numanode",
        "",
        {
            f"cpudevnuma{n:03d}": f"{16 * n}-{16 * n + 15},{128 + 16 * n}-{128 + 16 * n + 15}"
            for n in range(8)
        },
    ),
    ("intel-hybrid", "socket", "", {"cpudevsocket000": "0-23"}),
    ("arm-clusters", "numanode", "", {"cpudevnuma000": "0-15", "cpudevnuma001": "16-31"}),
    ("offline-middle", "machine", "", {"cpudevmachine": "0-3,6-8,10-15"}),
    (
        "snc",
        "numanode",
        "",
        {
            "cpudevnuma000": "0-7,32-39",
            "cpudevnuma001": "8-15,40-47",
            "cpudevnuma002": "16-23,48-55",
            "cpudevnuma003": "24-31,56-63",
        },
    ),
    ("big-1024", "machine", "0-1", {"cpudevmachine": "2-1023"}),
    (
        "big-1024",
        "numanode",
        "",
        {
            f"cpudevnuma{n:03d}": f"{64 * n}-{64 * n + 63},{512 + 64 * n}-{512 + 64 * n + 63}"
            for n in range(8)
        },
    ),
]


@pytest.mark.parametrize(
    ("name", "group_by", "reserved", "expected"),
    CPU_IDS,
    ids=[f"{row[0]}-{row[1]}{'-reserved' if row[2] else ''}" for row in CPU_IDS],
)
def test_grouped_devices_publish_their_cpus_and_the_nodes_layout(
    machines: Machines, name: str, group_by: GroupBy, reserved: str, expected: dict[str, str]
) -> None:
    model = build_devices(machines(name), external(group_by, reserved))
    assert {d.name: d.attributes[ATTR_CPU_IDS] for d in model.devices} == expected
    assert {d.attributes[ATTR_SMT_LAYOUT] for d in model.devices} == {FIXTURE_LAYOUTS[name]}
    for device in model.devices:
        assert CPUSet.parse(str(device.attributes[ATTR_CPU_IDS])) == device.cpus


@pytest.mark.parametrize("name", sorted(set(FIXTURE_LAYOUTS) - {"smt4"}))
@pytest.mark.parametrize("group_by", ["numanode", "socket", "machine"])
def test_every_fixture_fits_the_api_servers_limit(
    machines: Machines, name: str, group_by: GroupBy
) -> None:
    model = build_devices(machines(name), external(group_by))
    for device in model.devices:
        for attribute in (ATTR_CPU_IDS, ATTR_SMT_LAYOUT):
            assert len(str(device.attributes[attribute])) <= MAX_ATTRIBUTE_VALUE


def test_withheld_cpus_leave_cpu_ids(machines: Machines) -> None:
    model = build_devices(machines("xeon-2s-ht"), external("numanode"), CPUSet.parse("0,5"))
    assert model.by_name["cpudevnuma000"].attributes[ATTR_CPU_IDS] == "1-4,6-9,20-29"


@pytest.mark.parametrize("group_by", ["numanode", "socket"])
def test_the_drivers_own_placement_publishes_neither(machines: Machines, group_by: GroupBy) -> None:
    model = build_devices(machines("xeon-2s-ht"), DeviceOptions(group_by=group_by))
    for device in model.devices:
        assert ATTR_CPU_IDS not in device.attributes
        assert ATTR_SMT_LAYOUT not in device.attributes


def test_individual_devices_publish_neither(machines: Machines) -> None:
    model = build_devices(machines("xeon-2s-ht"), DeviceOptions(mode="individual"))
    assert not any(ATTR_CPU_IDS in d.attributes for d in model.devices)


# ---- refused whole ----------------------------------------------------------------------------


def test_three_way_smt_is_refused_naming_the_group(machines: Machines) -> None:
    with pytest.raises(ConfigError) as error:
        build_devices(machines("smt4"), external("numanode"))
    assert str(error.value) == (
        "device cpudevnuma000: dra.cpu/smtLayout: the V1 encoding covers 2-way SMT only, "
        "CPUs 0-3 are 4 threads of one core"
    )


def test_a_value_over_the_limit_is_refused_with_its_length() -> None:
    # Two NUMA nodes interleaved CPU by CPU: node 0's list is 0,2,4,...,62 (90 characters).
    machine = machine_of([(cpu,) for cpu in range(64)], numa_of=lambda cpu: cpu % 2)
    with pytest.raises(ConfigError) as error:
        build_devices(machine, external("numanode"))
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(
        "device cpudevnuma000: dra.cpu/cpuIDs would be 90 characters, over the API server's "
        "limit of 64 for an attribute value"
    )
    # The machine device of the same node fits: the whole list is one range.
    (device,) = build_devices(machine, external("machine")).devices
    assert device.attributes[ATTR_CPU_IDS] == "0-63"


def test_a_long_layout_is_refused_on_the_first_group() -> None:
    # Every core's threads `stride` apart with 20 different strides: a long layout.
    cores: list[tuple[int, ...]] = [
        (base, base + stride)
        for stride, base in zip(range(1, 21), range(100, 1100, 50), strict=True)
    ]
    machine = machine_of(cores)
    text_length = len(
        ";".join(
            f"{b},{b + s}>{s}" for s, b in zip(range(1, 21), range(100, 1100, 50), strict=True)
        )
    )
    with pytest.raises(
        ConfigError,
        match=rf"device cpudevnuma000: dra.cpu/smtLayout would be {text_length} characters, "
        "over the API server's limit of 64",
    ):
        build_devices(machine, external("numanode"))


def test_malformed_layouts_are_refused() -> None:
    with pytest.raises(ConfigError, match="CPU 0 has no sibling"):
        decode_smt_layout("0-1,3>2")
    with pytest.raises(ConfigError, match="bad stride"):
        decode_smt_layout("0-3>x")


def test_published_devices_stay_whole_when_withheld_cpus_would_overflow_cpu_ids() -> None:
    root = logging.getLogger("dracpu")
    handlers, verbosity = list(root.handlers), log.verbosity()
    stream = io.StringIO()
    log.setup(2, "allocator-test", stream)
    try:
        _stay_whole(stream)
    finally:
        log.setup(verbosity, "dracpu", io.StringIO())
        root.handlers[:] = handlers


def _stay_whole(stream: io.StringIO) -> None:
    # One NUMA node of 64 CPUs: "0-63" fits; with every other CPU held by a draining claim
    # (its container still runs) the list would be "0,2,4,...,62", 90 characters.
    machine = machine_of([(cpu,) for cpu in range(64)])
    state = NodeState(machine=machine, devices=build_devices(machine, external("numanode")))
    published = PublishedDevices()
    first = published.of(state)
    assert first.by_name["cpudevnuma000"].attributes[ATTR_CPU_IDS] == "0-63"
    held = CPUSet(range(1, 64, 2))
    record = ClaimRecord("gone", "ns", "gone", held, (), 1)
    draining = replace(state, draining={"gone": record})
    assert published.of(draining) is first
    (line,) = [line for line in stream.getvalue().splitlines() if "cannot publish" in line]
    assert "dra.cpu/cpuIDs would be 90 characters" in line
    # Once the claim's container is gone the devices follow the state again.
    assert published.of(state) is first
    fewer = replace(state, draining={"gone": replace(record, cpus=CPUSet(range(32, 64)))})
    assert published.of(fewer).by_name["cpudevnuma000"].attributes[ATTR_CPU_IDS] == "0-31"
