"""The driver's Helm chart and the pinned helm binary that renders it (tools/install-helm.sh
builds it into .tools/bin when missing)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "dra-driver-cpu"
INSTALL_HELM = ROOT / "tools" / "install-helm.sh"
HELM = ROOT / ".tools" / "bin" / "helm"
# Oldest Kubernetes the chart supports (Chart.yaml kubeVersion); resource.k8s.io/v1 is GA there.
KUBE_VERSION = "1.34.0"


def pinned_helm_version() -> str:
    match = re.search(r'HELM_VERSION="\$\{HELM_VERSION:-(v[0-9.]+)\}"', INSTALL_HELM.read_text())
    assert match, "tools/install-helm.sh no longer pins HELM_VERSION"
    return match.group(1)


def ensure_helm() -> tuple[Path | None, str]:
    """The helm binary (installing the pinned release when missing), or None and why not."""
    result = subprocess.run(
        ["bash", str(INSTALL_HELM)], capture_output=True, text=True, timeout=1500, check=False
    )
    if result.returncode != 0 or not HELM.exists():
        tail = " ".join((result.stderr or result.stdout).strip().splitlines()[-3:])
        return None, f"helm {pinned_helm_version()} could not be built: {tail}"
    return HELM, ""
