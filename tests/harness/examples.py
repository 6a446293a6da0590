"""The manifests of examples/ as the tests read them: each file is a ResourceClaimTemplate and
a Pod, under a comment saying what the pod gets and three lines the tests act on:

    # chart: driverConfig.groupBy=socket      (the chart values its nodes need; "(the defaults)")
    # needs: a GPU DRA driver ...             (optional: what a cluster needs besides this driver)
    # expect: cpus=4 one-socket               (what the kernel shows of the pod's claimed container)

Pure text and YAML: no cluster, no subprocess."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DEFAULTS = "(the defaults)"

# What `expect:` may say, and what each word means of the claimed container's CPUs.
CHECKS = {
    "cpus": "runs on exactly its claim's CPUs (DRA_CPUSET_<uid>), this many",
    "cpuset": "runs on exactly these CPUs",
    "one-numa-node": "every CPU on one NUMA node",
    "one-socket": "every CPU on one socket",
    "whole-cores": "every SMT sibling of each CPU is among them",
    "even-across-numa": "the NUMA nodes it spans hold equal shares, give or take one CPU",
    "numa-local-memory": "its memory nodes (Mems_allowed_list) are its CPUs' NUMA nodes",
}
HEADER = re.compile(r"^# (chart|needs|expect): (.*)$")


@dataclass(frozen=True)
class Example:
    path: Path
    # The documents to use instead of the file's (a scaled copy's).
    loaded: list[dict[str, Any]] | None = field(default=None, compare=False, hash=False)

    @property
    def name(self) -> str:
        return self.path.stem

    @cached_property
    def header(self) -> dict[str, str]:
        found: dict[str, str] = {}
        for line in self.path.read_text(encoding="utf-8").splitlines():
            if not line.startswith("#"):
                break
            match = HEADER.match(line)
            if match:
                found[match.group(1)] = match.group(2).strip()
        return found

    @property
    def chart_values(self) -> tuple[str, ...]:
        """The `--set` items the example's nodes need; empty for the chart's defaults."""
        said = self.header.get("chart", "")
        return () if said == DEFAULTS else tuple(said.split())

    @property
    def needs(self) -> str:
        return self.header.get("needs", "")

    @property
    def expect(self) -> dict[str, str]:
        """`cpus=4 whole-cores` -> {"cpus": "4", "whole-cores": ""}."""
        words = (word.partition("=") for word in self.header.get("expect", "").split())
        return {key: value for key, _, value in words}

    @cached_property
    def documents(self) -> list[dict[str, Any]]:
        if self.loaded is not None:
            return self.loaded
        loaded = [d for d in yaml.safe_load_all(self.path.read_text(encoding="utf-8")) if d]
        return [d for d in loaded if isinstance(d, dict)]

    def one(self, kind: str) -> dict[str, Any]:
        found = [d for d in self.documents if d.get("kind") == kind]
        assert len(found) == 1, f"{self.path.name}: {len(found)} {kind} documents"
        return found[0]

    @property
    def pod(self) -> dict[str, Any]:
        return self.one("Pod")

    @property
    def template(self) -> dict[str, Any]:
        return self.one("ResourceClaimTemplate")

    def requests(self) -> list[dict[str, Any]]:
        """The template's device requests (`exactly` of each)."""
        devices = self.template["spec"]["spec"]["devices"]
        return [request["exactly"] for request in devices["requests"]]

    def cpu_requests(self) -> list[dict[str, Any]]:
        """The requests of DeviceClass dra.cpu."""
        return [r for r in self.requests() if r.get("deviceClassName") == "dra.cpu"]

    def claimed_cpus(self) -> int:
        """The CPUs the claim asks for: its `dra.cpu/cpu` capacity or its device count."""
        total = 0
        for request in self.cpu_requests():
            capacity = request.get("capacity", {}).get("requests", {}).get("dra.cpu/cpu")
            total += int(capacity) if capacity is not None else int(request.get("count", 1))
        return total

    def claimed_containers(self) -> list[str]:
        return [c["name"] for c in self.pod["spec"]["containers"] if claims_of(c)]

    def pod_cpu_requests(self) -> list[str]:
        """Every cpu quantity the pod asks for: pod-level requests, else its containers'."""
        spec = self.pod["spec"]
        pod_level = spec.get("resources", {}).get("requests", {}).get("cpu")
        if pod_level is not None:
            return [str(pod_level)]
        return [
            str(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
            for c in spec["containers"]
        ]

    def scaled(self, cpus: int) -> Example:
        """The example with the claim's CPUs, and every cpu quantity of the pod equal to
        them, set to `cpus`: the same example for a node too small for its sizes."""
        before = str(self.claimed_cpus())
        documents = copy.deepcopy(self.documents)
        for document in documents:
            if document["kind"] == "ResourceClaimTemplate":
                for request in document["spec"]["spec"]["devices"]["requests"]:
                    exactly = request["exactly"]
                    if exactly.get("deviceClassName") != "dra.cpu":
                        continue
                    capacity = exactly.get("capacity", {}).get("requests", {})
                    if "dra.cpu/cpu" in capacity:
                        capacity["dra.cpu/cpu"] = str(cpus)
                    elif "count" in exactly:
                        exactly["count"] = cpus
            if document["kind"] == "Pod":
                spec = document["spec"]
                for resources in [spec.get("resources", {})] + [
                    c.get("resources", {}) for c in spec["containers"]
                ]:
                    for kind in ("requests", "limits"):
                        if str(resources.get(kind, {}).get("cpu")) == before:
                            resources[kind]["cpu"] = str(cpus)
        return Example(self.path, documents)


def claims_of(container: dict[str, Any]) -> list[str]:
    return [c["name"] for c in container.get("resources", {}).get("claims", [])]


def examples() -> list[Example]:
    return [Example(path) for path in sorted(EXAMPLES.glob("*.yaml"))]
