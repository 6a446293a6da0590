"""The NetworkPolicy enforcer of the fleet's guest node, run by the agent: SIG Network's
kube-network-policies as a process of the node, as its DaemonSet pod would run it (the host's
network, the in-cluster identity of a ServiceAccount). It installs nftables rules that send the
first packet of every connection to or from a pod that some policy selects to an nfqueue, and
answers each such packet from the policies it watches. The netfilter modules it needs are
loaded from the guest kernel's own module tree (the host's cache, which the guest sees).

Started with `--fail-open`: packets pass while no enforcer reads the queue, so its end cannot
cut the node's pods off; a check that a packet was refused therefore also asks the enforcer for
its drop count."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import lzma
import os
import signal
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

TABLE = "kube-network-policies"  # its nftables table (family inet)
METRICS = "127.0.0.1:9080"
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
SYS_INIT_MODULE = 175  # x86_64
LOG_TAIL = 2000

_enforcer: dict[str, subprocess.Popen[bytes]] = {}


def load_modules(paths: list[str]) -> list[str]:
    """Each module of `paths` (dependencies first) loaded with init_module(2); one already
    there is fine. Answers the names loaded now."""
    libc = ctypes.CDLL(None, use_errno=True)
    loaded = []
    for path in paths:
        image = Path(path).read_bytes()
        if path.endswith(".xz"):
            image = lzma.decompress(image)
        done = libc.syscall(SYS_INIT_MODULE, image, ctypes.c_ulong(len(image)), b"")
        code = ctypes.get_errno()
        if done != 0 and code != errno.EEXIST:
            raise OSError(code, f"init_module {Path(path).name}: {os.strerror(code)}")
        if done == 0:
            loaded.append(Path(path).name.split(".ko")[0])
    return loaded


def network_policy_start(
    state: Path,
    binary: str,
    modules: list[str],
    token: str,
    ca: str,
    node_name: str,
    server: str,
) -> dict[str, Any]:
    """The modules loaded, bridged IPv4 traffic handed to netfilter (the pod network is a
    bridge), the ServiceAccount's token and CA where in-cluster clients read them, and the
    enforcer started for node `node_name`, reaching the API server at `server` (host:port);
    its log in the state folder (`logs/kube-network-policies.log`)."""
    if TABLE in _enforcer and _enforcer[TABLE].poll() is None:
        raise RuntimeError(f"{TABLE} runs already (pid {_enforcer[TABLE].pid})")
    loaded = load_modules(modules)
    Path("/proc/sys/net/bridge/bridge-nf-call-iptables").write_text("1\n")
    SERVICE_ACCOUNT.mkdir(parents=True, exist_ok=True)
    (SERVICE_ACCOUNT / "token").write_text(token)
    (SERVICE_ACCOUNT / "ca.crt").write_text(ca)
    (SERVICE_ACCOUNT / "namespace").write_text("kube-system")
    host, _, port = server.rpartition(":")
    log = state / "logs" / f"{TABLE}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        _enforcer[TABLE] = subprocess.Popen(
            [binary, f"--hostname-override={node_name}", "--disable-nri", "--fail-open",
             f"--metrics-bind-address={METRICS}", "-v=2"],
            env={**os.environ, "KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port},
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    return {"pid": _enforcer[TABLE].pid, "loaded": loaded}


def _running(state: Path) -> None:
    process = _enforcer.get(TABLE)
    if process is None:
        raise RuntimeError(f"{TABLE} was not started")
    if process.poll() is not None:
        tail = (state / "logs" / f"{TABLE}.log").read_text(errors="replace")[-LOG_TAIL:]
        raise RuntimeError(f"{TABLE} exited with {process.returncode}: {tail}")


def network_policy_pods(state: Path) -> list[str]:
    """The IPv4 addresses the enforcer's rules send to its queue (its `podips-v4` set: the
    node's pods that a policy selects), read with `nft`; none before its first sync."""
    _running(state)
    done = subprocess.run(
        ["nft", "-j", "list", "set", "inet", TABLE, "podips-v4"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        return []  # its table is not written yet
    for entry in json.loads(done.stdout)["nftables"]:
        if "set" in entry:
            return [str(e) for e in entry["set"].get("elem", [])]
    return []


def network_policy_verdicts(state: Path) -> dict[str, float]:
    """The packets the enforcer has judged, by verdict (its `packet_count` metric)."""
    _running(state)
    with urllib.request.urlopen(f"http://{METRICS}/metrics", timeout=60) as reply:
        text = reply.read().decode()
    verdicts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("kube_network_policies_packet_count{"):
            labels, _, value = line.rpartition(" ")
            verdict = labels.split('verdict="', 1)[1].split('"', 1)[0]
            verdicts[verdict] = verdicts.get(verdict, 0.0) + float(value)
    return verdicts


def network_policy_stop(state: Path) -> bool:
    """The enforcer stopped (it removes its table on the way out); killed if it takes more than
    30 s. False when none ran."""
    process = _enforcer.pop(TABLE, None)
    if process is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(30)
    return True
