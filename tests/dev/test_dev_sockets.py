"""`dev up` removes only the sockets its own processes listen on: never a runtime's NRI socket."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from dracpu.dev.layout import RunLayout
from dracpu.dev.up import owned_sockets, remove_stale_sockets


@pytest.mark.parametrize(
    ("kubelet_sim", "runtime_sim", "foreign"),
    [
        (True, True, set()),
        (True, False, {"nri", "runtime-sim"}),
        (False, True, {"kubelet-sim"}),
        (False, False, {"nri", "runtime-sim", "kubelet-sim"}),
    ],
    ids=["both-sims", "no-runtime-sim", "no-kubelet-sim", "neither"],
)
def test_owned_sockets_leave_out_the_outside_peers(
    tmp_path: Path, kubelet_sim: bool, runtime_sim: bool, foreign: set[str]
) -> None:
    layout = RunLayout.at(tmp_path)
    by_name = {
        "nri": layout.nri_socket,
        "runtime-sim": layout.runtime_sim_socket,
        "kubelet-sim": layout.kubelet_sim_socket,
    }
    owned = set(owned_sockets(layout, kubelet_sim=kubelet_sim, runtime_sim=runtime_sim))
    assert owned == set(layout.all_sockets()) - {by_name[name] for name in foreign}


def test_a_live_runtime_nri_socket_survives_start_and_stop_without_the_simulator(
    tmp_path: Path,
) -> None:
    layout = RunLayout.at(tmp_path)
    for directory in layout.directories():
        directory.mkdir(parents=True, exist_ok=True)
    runtime = socket.socket(socket.AF_UNIX)
    runtime.bind(str(layout.nri_socket))
    runtime.listen()
    leftover = socket.socket(socket.AF_UNIX)
    leftover.bind(str(layout.socket("allocator")))
    try:
        sockets = owned_sockets(layout, kubelet_sim=True, runtime_sim=False)
        assert remove_stale_sockets(sockets) == [layout.socket("allocator")]
        assert remove_stale_sockets(sockets) == []
        assert layout.nri_socket.is_socket()
        probe = socket.socket(socket.AF_UNIX)
        probe.connect(str(layout.nri_socket))
        probe.close()
    finally:
        runtime.close()
        leftover.close()
