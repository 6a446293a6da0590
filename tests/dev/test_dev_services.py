"""The command lines of a local run follow the project's flag conventions and stay inside the
run folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from dracpu.core.errors import InvalidInputError
from dracpu.dev.layout import RunLayout
from dracpu.dev.services import SERVICES, SIMULATORS, DevOptions, service_commands

LAYOUT = RunLayout.at("/tmp/dracpu-dev-test")
OPTIONS = DevOptions(sysfs_root=Path("/tmp/dracpu-dev-test/sysfs"))
GRPC_SERVICES = ("topology", "allocator", "dra-plugin", "nri-plugin")


def flags(argv: list[str]) -> dict[str, str]:
    """`--flag value` pairs of a command line (flags without a value map to '')."""
    pairs: dict[str, str] = {}
    for index, word in enumerate(argv):
        if word.startswith("-"):
            following = argv[index + 1] if index + 1 < len(argv) else ""
            pairs[word] = "" if following.startswith("-") else following
    return pairs


def test_start_order_puts_dependencies_first() -> None:
    assert list(service_commands(LAYOUT, OPTIONS)) == list(SERVICES)
    assert SERVICES.index("topology") < SERVICES.index("allocator")
    assert SERVICES.index("runtime-sim") < SERVICES.index("nri-plugin")
    assert SERVICES.index("dra-plugin") < SERVICES.index("kubelet-sim") < SERVICES.index("api")


@pytest.mark.parametrize("service", GRPC_SERVICES)
def test_each_grpc_service_listens_in_the_sockets_folder(service: str) -> None:
    argv = service_commands(LAYOUT, OPTIONS)[service]
    assert argv[0] == f"dracpu-{service}"
    assert flags(argv)["--socket"] == str(LAYOUT.root / "sockets" / f"{service}.sock")


@pytest.mark.parametrize(
    ("service", "peer_flags"),
    [
        ("allocator", {"--topology-socket"}),
        ("nri-plugin", {"--allocator-socket"}),
        ("dra-plugin", {"--allocator-socket"}),
        ("api", {f"--{peer}-socket" for peer in GRPC_SERVICES}),
    ],
)
def test_clients_find_their_peers(service: str, peer_flags: set[str]) -> None:
    argv = flags(service_commands(LAYOUT, OPTIONS)[service])
    for flag in peer_flags:
        peer = flag.removeprefix("--").removesuffix("-socket")
        if service == "api" and peer == "allocator":  # reads only: the read-only socket
            peer = "allocator-ro"
        assert argv[flag] == str(LAYOUT.socket(peer))


@pytest.mark.parametrize(
    ("service", "flag", "path"),
    [
        ("topology", "--sysfs-root", "sysfs"),
        ("allocator", "--state-dir", "state"),
        ("allocator", "--cdi-dir", "cdi"),
        ("dra-plugin", "--kubelet-root-dir", "kubelet"),
        ("dra-plugin", "--kubeconfig", "apiserver/kubeconfig"),
        ("apiserver", "--kubeconfig", "apiserver/kubeconfig"),
        ("dra-plugin", "--cdi-dir", "cdi"),
        ("nri-plugin", "--nri-socket", "nri/nri.sock"),
        ("runtime-sim", "--nri-socket", "nri/nri.sock"),
        ("kubelet-sim", "--kubelet-root-dir", "kubelet"),
    ],
)
def test_paths_live_in_the_run_folder(service: str, flag: str, path: str) -> None:
    argv = flags(service_commands(LAYOUT, OPTIONS)[service])
    assert argv[flag] == str(LAYOUT.root / path)


def test_an_outside_kubeconfig_replaces_the_fake_for_the_dra_plugin_only() -> None:
    options = DevOptions(sysfs_root=Path("/sys"), kubeconfig=Path("/etc/kube/admin.conf"))
    commands = service_commands(LAYOUT, options)
    plugin = flags(commands["dra-plugin"])
    assert plugin["--kubeconfig"] == "/etc/kube/admin.conf"
    assert "apiserver" not in commands  # no fake beside a real API server
    assert "kubelet-sim" in commands  # it still plays prepare for the API server's claims
    assert all(
        "--kubeconfig" not in argv for name, argv in commands.items() if name != "dra-plugin"
    )


def test_the_fake_starts_first_and_only_the_dra_plugin_talks_to_it() -> None:
    commands = service_commands(LAYOUT, OPTIONS)
    assert next(iter(commands)) == "apiserver"
    assert flags(commands["apiserver"])["--address"] == OPTIONS.apiserver_address
    assert [name for name, argv in commands.items()
            if str(LAYOUT.apiserver_kubeconfig) in argv] == ["apiserver", "dra-plugin"]  # fmt: skip


def test_api_binds_the_requested_address() -> None:
    options = DevOptions(sysfs_root=Path("/sys"), api_address="127.0.0.1:18080")
    assert flags(service_commands(LAYOUT, options)["api"])["--bind-address"] == "127.0.0.1:18080"


def test_config_and_verbosity_reach_every_service_but_not_the_simulators() -> None:
    options = DevOptions(sysfs_root=Path("/sys"), config=Path("/etc/x.yaml"), verbosity=4)
    for name, argv in service_commands(LAYOUT, options).items():
        expected = {} if name in SIMULATORS else {"--config": "/etc/x.yaml", "-v": "4"}
        assert {k: v for k, v in flags(argv).items() if k in ("--config", "-v")} == expected


@pytest.mark.parametrize(
    ("options", "missing"),
    [
        (DevOptions(sysfs_root=Path("/sys"), kubelet_sim=False), {"kubelet-sim"}),
        (DevOptions(sysfs_root=Path("/sys"), runtime_sim=False), {"runtime-sim"}),
        (
            DevOptions(sysfs_root=Path("/sys"), kubelet_sim=False, runtime_sim=False),
            {"kubelet-sim", "runtime-sim"},
        ),
    ],
    ids=["no-kubelet-sim", "no-runtime-sim", "neither"],
)
def test_simulators_can_be_left_out(options: DevOptions, missing: set[str]) -> None:
    assert set(SERVICES) - set(service_commands(LAYOUT, options)) == missing


def test_a_run_folder_too_deep_for_unix_sockets_is_refused() -> None:
    deep = RunLayout.at("/tmp/" + "d" * 80)
    with pytest.raises(InvalidInputError, match=r"too deep.*limit is 107"):
        deep.check()
    LAYOUT.check()
