"""`dracpu uninstall-check`: the chart's pre-delete hook. Refuses while a pod that holds a claim
allocated by this driver still runs, naming each, so `helm uninstall` does not take the driver
from under pinned containers; `helm uninstall --no-hooks` is the operator's override.

A pod holds a claim when the claim's `status.reservedFor` names it (the scheduler reserves the
claim for the pods it binds) and a result of its `status.allocation` is this driver's. A
reserved pod that no longer exists, or whose phase is Succeeded or Failed, holds nothing.

Exit 0 when no pod holds one; 1 with one line naming them; 2 with one line when the API server
cannot be asked (unreachable, refused).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dracpu.core.cli import ArgumentParser, run_async
from dracpu.core.driver import DRIVER_NAME

PROG = "dracpu uninstall-check"
SUMMARY = "refuse uninstalling while pods holding dra.cpu claims run"
REFUSED = 1
DONE_PHASES = ("Succeeded", "Failed")
PAGE = 'docs/user/installation.md, "Uninstall"'
CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"
PODS = "/api/v1/pods"


@dataclass(frozen=True, order=True)
class ClaimedPod:
    namespace: str
    pod: str
    claim: str
    node: str

    def describe(self) -> str:
        where = f" on {self.node}" if self.node else ""
        return f"{self.namespace}/{self.pod} (claim {self.claim}{where})"


def _allocated_by(claim: Mapping[str, Any], driver: str) -> bool:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return any(isinstance(r, Mapping) and r.get("driver") == driver for r in results)


def claimed_pods(
    claims: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], driver: str
) -> list[ClaimedPod]:
    """The pods, still running, that hold a claim allocated by `driver`."""
    live = {
        str((p.get("metadata") or {}).get("uid")): p
        for p in pods
        if (p.get("status") or {}).get("phase") not in DONE_PHASES
    }
    found: set[ClaimedPod] = set()
    for claim in claims:
        if not _allocated_by(claim, driver):
            continue
        meta = claim.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        for consumer in (claim.get("status") or {}).get("reservedFor") or []:
            if not isinstance(consumer, Mapping) or consumer.get("resource") != "pods":
                continue
            pod = live.get(str(consumer.get("uid")))
            if pod is None:
                continue
            found.add(
                ClaimedPod(
                    namespace=namespace,
                    pod=str(consumer.get("name")),
                    claim=str(meta.get("name")),
                    node=str((pod.get("spec") or {}).get("nodeName") or ""),
                )
            )
    return sorted(found)


def refusal(held: Sequence[ClaimedPod], driver: str) -> str:
    """The one line that refuses the uninstall."""
    pods = "; ".join(p.describe() for p in held)
    return (
        f"{PROG}: refusing to uninstall: {len(held)} running pod(s) hold {driver} claims: "
        f"{pods}. Delete them first (their claims are then unprepared and their CPUs returned), "
        "or uninstall with `helm uninstall --no-hooks` to leave them running on their CPUs "
        f"with no driver ({PAGE})"
    )


async def check(kubeconfig: str) -> int:
    from dracpu.dra_plugin.cluster.apiserver import KubernetesAPI

    api = KubernetesAPI(kubeconfig)
    try:
        claims = await api.list_all(CLAIMS, "list resourceclaims")
        pods = await api.list_all(PODS, "list pods", "status.phase!=Succeeded,status.phase!=Failed")
    finally:
        await api.aclose()
    held = claimed_pods(claims, pods, DRIVER_NAME)
    if held:
        print(refusal(held, DRIVER_NAME), flush=True)
        return REFUSED
    print(f"{PROG}: no running pod holds a {DRIVER_NAME} claim; uninstalling", flush=True)
    return 0


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog=PROG,
        description="Exit 1, naming them, while running pods hold ResourceClaims allocated by "
        "the dra.cpu driver; exit 0 when none does. The chart runs it before `helm uninstall`.",
    )
    parser.add_argument(
        "--kubeconfig",
        default="",
        metavar="FILE",
        help="the API server's kubeconfig (default: the pod's service account)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_async(lambda: check(args.kubeconfig), PROG)


if __name__ == "__main__":
    sys.exit(main())
