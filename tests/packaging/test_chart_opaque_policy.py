"""The chart's admission policy for `dra.cpu` opaque configurations: the committed template is the
one generated from the allocator's schema, it renders as valid Kubernetes where the cluster
serves ValidatingAdmissionPolicy, on by default, off with `admission.validateClaims: false`.

What it refuses is checked on a real API server (tests/controlplane/test_cp_opaque_admission.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml
from helm_chart import CHART, KUBE_VERSION, ROOT

from dracpu.allocator.domain.opaque_cel import TEMPLATE, policy_template

NAME = "dracpu-dra-driver-cpu-opaque-config"


def rendered(helm: Path, *extra: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(helm), "template", "dracpu", str(CHART), "--namespace", "kube-system",
         "--kube-version", KUBE_VERSION, *extra],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return [o for o in yaml.safe_load_all(done.stdout) if o and o["metadata"]["name"] == NAME]


def test_the_committed_template_is_the_generated_one() -> None:
    assert (CHART / TEMPLATE).read_text(encoding="utf-8") == policy_template(), (
        "run tools/gen-opaque-policy.py"
    )
    check = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen-opaque-policy.py"), "--check"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (check.returncode, check.stderr) == (0, "")


def test_a_policy_and_its_binding_by_default(helm: Path) -> None:
    policy, binding = rendered(helm)  # plain `helm template`: no cluster asked
    assert (policy["kind"], binding["kind"]) == (
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")  # fmt: skip
    assert binding["spec"] == {"policyName": NAME, "validationActions": ["Deny"]}
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["resourceclaims", "resourceclaimtemplates", "deviceclasses"]
    assert rule["operations"] == ["CREATE", "UPDATE"]
    # Unlike the driver's own policies, it binds every writer: workloads write claims.
    assert "matchConditions" not in spec
    for obj in (policy, binding):
        assert kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


def test_no_policy_when_turned_off(helm: Path) -> None:
    assert rendered(helm, "--set", "admission.validateClaims=false") == []


def test_the_value_is_in_the_schema(helm: Path) -> None:
    done = subprocess.run(
        [str(helm), "template", "dracpu", str(CHART), "--set", "admission.validateClaim=true"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0 and "validateClaim" in done.stderr
