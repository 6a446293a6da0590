"""A runtime with NRI off: the nri-plugin says so when it starts, in one line naming the runtime
and its version (asked of the runtime's CRI socket) and the setting that turns NRI on. Runs on
the runtime DRACPU_RUNTIME selects (CRI-O: `enable_nri = false` under [crio.nri]; containerd:
`disable = true` under its NRI plugin)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from harness.realnode_stack import make_node, require_realnode, runtime
from harness.waits import wait_for

pytestmark = pytest.mark.realnode

# The NRI setting of each runtime's configuration as the bed writes it, then turned off.
NRI_OFF = {
    "crio": ("enable_nri = true", "enable_nri = false"),
    "containerd": ("    disable = false\n    socket_path", "    disable = true\n    socket_path"),
}
SETTING = {
    "crio": ("CRI-O", "enable_nri = true under [crio.nri]"),
    "containerd": ("containerd", 'disable = false under [plugins."io.containerd.nri.v1.nri"]'),
}


def test_a_runtime_with_nri_off_is_named_with_its_version_and_setting_at_the_start() -> None:
    require_realnode()
    base = Path(tempfile.mkdtemp(prefix="dracpu-rn-nrioff-", dir="/tmp"))
    node = make_node(base / "node", base / "rd")
    on, off = NRI_OFF[runtime()]
    config = node.config_text()
    assert on in config
    node.config_text = lambda: config.replace(on, off)  # type: ignore[method-assign]
    plugin: subprocess.Popen[str] | None = None
    try:
        node.start()
        version = node.runtime_version()
        assert not node.nri_socket.exists(), "the runtime opened NRI although it is off"
        plugin = subprocess.Popen(
            [sys.executable, "-m", "dracpu.nri_plugin.main",
             "--socket", str(base / "p.sock"), "--allocator-socket", str(base / "a.sock"),
             "--nri-socket", str(node.nri_socket), "--cri-socket", str(node.socket)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )  # fmt: skip
        assert plugin.stdout is not None
        lines: list[str] = []

        def read_until_said() -> bool:
            """One more line of the plugin's; done at the one that names the socket, or at the
            end of its output (the assertions below then say what it said instead)."""
            assert plugin is not None and plugin.stdout is not None
            line = plugin.stdout.readline()
            lines.append(line)
            return not line or "no NRI socket" in line

        wait_for(read_until_said, "the plugin to find no NRI socket", timeout=60, interval=0)
        plugin.terminate()
        rest, _ = plugin.communicate(timeout=30)
        lines += rest.splitlines()
        said = [x.replace('\\"', '"') for x in lines if "has NRI off" in x]  # klog's quoting
        assert len(said) == 1, "".join(lines)
        name, setting = SETTING[runtime()]
        assert f"no NRI socket at {node.nri_socket}: {name} {version} has NRI off" in said[0]
        assert setting in said[0], said[0]
    finally:
        if plugin is not None and plugin.poll() is None:
            plugin.kill()
            plugin.wait()
        node.teardown()
        shutil.rmtree(base, ignore_errors=True)
