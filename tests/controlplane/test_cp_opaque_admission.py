"""The chart's admission policy for `dra.cpu` opaque configurations on the real API server.

The policy and its binding are applied as `helm template` renders them with the default values
(and the API versions the server serves). Then every case of harness.opaque_cases is created
as a ResourceClaim and as a ResourceClaimTemplate: a case the driver refuses is refused at
create, the message naming the same field in the same words as the driver's parser and rules
(`dracpu.allocator.claims.admission`), behind the entry's field; a case the driver accepts is
created. Objects are sent as JSON, byte for byte (`kubectl create --raw`): kubectl's own
decoding would turn `2.0` into `2`.

A DeviceClass with a bad configuration is refused, a good one created; an update that leaves
the configurations alone is not checked, so an object stored before the policy stays usable
and deletable. With the binding deleted, invalid claims are created, allocated by the real
scheduler and prepared by the driver, whose prepare refuses each with the same words.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from controlplane.checks import DEVICE_CLASS, NAMESPACE, allocation, complete, slices
from harness.control_plane import KUBE_VERSION, REPO, CommandError, ControlPlane
from harness.driver_stack import DriverStack
from harness.opaque_cases import CASES, INVALID, OpaqueCase, config, named_field
from harness.waits import wait_for

from dracpu.allocator.claims.admission import parameters_refusal
from dracpu.allocator.domain.opaque import parse_parameters
from dracpu.core.errors import InvalidInputError
from dracpu.dev.kubelet_sim import Claim

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(900)]
HELM = REPO / ".tools" / "bin" / "helm"
CHART = REPO / "helm" / "dra-driver-cpu"
RELEASE, CHART_NAMESPACE = "dra-driver-cpu", "kube-system"
POLICY = f"{RELEASE}-opaque-config"
DENIED = f"ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}' denied request: "
OTHER_DRIVER = {"opaque": {"driver": "gpu.example.com", "parameters": {"apiVersion": "v9"}}}
PROBE = "oc-probe"
ON_THE_DRIVERS_NODE, ON_THE_EXTERNAL_NODE = "oc-cpumanager", "oc-external"


def driver_words(case: OpaqueCase) -> str:
    return parameters_refusal(json.dumps(case.parameters).encode())


def devices(parameters: Any) -> dict[str, Any]:
    """A request for one CPU of dra.cpu, another driver's entry (ignored), then ours."""
    return {
        "requests": [{"name": "cpus", "exactly": {
            "deviceClassName": "dra.cpu", "capacity": {"requests": {"dra.cpu/cpu": "1"}}}}],
        "config": [OTHER_DRIVER, {"requests": ["cpus"],
                                  "opaque": {"driver": "dra.cpu", "parameters": parameters}}],
    }  # fmt: skip


def resource_claim(name: str, parameters: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"devices": devices(parameters)}}  # fmt: skip


def claim_template(name: str, parameters: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"spec": {"devices": devices(parameters)}}}  # fmt: skip


def device_class(name: str, parameters: Any) -> dict[str, Any]:
    selector = {"cel": {"expression": 'device.driver == "dra.cpu"'}}
    entry = {"opaque": {"driver": "dra.cpu", "parameters": parameters}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [selector], "config": [entry]}}  # fmt: skip


API = "/apis/resource.k8s.io/v1"
PATHS = {
    "ResourceClaim": f"{API}/namespaces/{NAMESPACE}/resourceclaims",
    "ResourceClaimTemplate": f"{API}/namespaces/{NAMESPACE}/resourceclaimtemplates",
    "DeviceClass": f"{API}/deviceclasses",
}


def create(cp: ControlPlane, obj: dict[str, Any]) -> None:
    """POST the object's JSON as it is. Compact, keys sorted, as a patch re-encodes it: the
    server compares a claim's spec byte for byte on update, parameters included."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    cp.kubectl("create", "--raw", PATHS[obj["kind"]], "-f", "-", stdin=text)


def refused(cp: ControlPlane, obj: dict[str, Any]) -> str:
    with pytest.raises(CommandError) as caught:
        create(cp, obj)
    return str(caught.value)


def rendered_policy() -> list[dict[str, Any]]:
    text = subprocess.run(
        [str(HELM), "template", RELEASE, str(CHART), "--no-hooks", "--namespace", CHART_NAMESPACE,
         "--kube-version", KUBE_VERSION],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return [d for d in yaml.safe_load_all(text) if d and d["metadata"]["name"] == POLICY]


def in_force(cp: ControlPlane) -> bool:
    """Whether the admission plugin has picked the binding up (a moment after it is stored):
    a claim it refuses is refused."""
    try:
        create(cp, resource_claim(PROBE, config(stratgy="spread")))
    except CommandError as exc:
        return DENIED in str(exc)
    cp.kubectl("delete", "resourceclaim", PROBE, "-n", NAMESPACE)
    return False


@pytest.fixture(scope="module")
def policy(control_plane: ControlPlane) -> Iterator[list[dict[str, Any]]]:
    if not HELM.exists():
        pytest.skip(f"helm not installed at {HELM} (run make helm-bin)")
    documents = rendered_policy()
    assert [d["kind"] for d in documents] == [
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]  # fmt: skip
    control_plane.apply(*documents)
    control_plane.apply(DEVICE_CLASS)
    try:
        wait_for(lambda: in_force(control_plane), "the policy in force", timeout=60, interval=0.2)
        yield documents
    finally:
        for kind in ("ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"):
            control_plane.kubectl("delete", kind, POLICY, "--ignore-not-found")


@pytest.fixture
def binding_off(control_plane: ControlPlane, policy: list[dict[str, Any]]) -> Iterator[None]:
    cp = control_plane
    cp.kubectl("delete", "ValidatingAdmissionPolicyBinding", POLICY)
    wait_for(lambda: not in_force(cp), "the binding out of force", timeout=60, interval=0.2)
    try:
        yield
    finally:
        cp.apply(policy[1])
        wait_for(lambda: in_force(cp), "the binding back in force", timeout=60, interval=0.2)


def object_name(kind: str, case: OpaqueCase) -> str:
    return f"{'c' if kind == 'ResourceClaim' else 't'}-{case.id}"


BUILDERS = {"ResourceClaim": resource_claim, "ResourceClaimTemplate": claim_template}
PREFIXES = {"ResourceClaim": "spec.devices", "ResourceClaimTemplate": "spec.spec.devices"}


# compat: the claims; the templates go through the same expressions.
@pytest.mark.parametrize(
    "kind", [pytest.param("ResourceClaim", marks=pytest.mark.compat), "ResourceClaimTemplate"]
)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_create_is_refused_exactly_when_the_driver_refuses_naming_the_same_field(
    control_plane: ControlPlane, policy: list[dict[str, Any]], case: OpaqueCase, kind: str
) -> None:
    cp = control_plane
    name = object_name(kind, case)
    obj = BUILDERS[kind](name, case.parameters)
    cp.kubectl("delete", kind, name, "-n", NAMESPACE, "--ignore-not-found")
    words = driver_words(case)
    if case.valid:
        assert words == ""
        create(cp, obj)
        cp.kubectl("delete", kind, name, "-n", NAMESPACE, "--wait=false")
        return
    said = refused(cp, obj)
    assert f"{DENIED}{PREFIXES[kind]}.config[1].opaque.parameters: {words}" in said
    assert named_field(words) == case.field
    assert not cp.items(kind.lower() + "s", NAMESPACE, selector=f"metadata.name={name}")


def test_a_device_class_is_checked_on_create_and_on_a_change_of_its_config(
    control_plane: ControlPlane, policy: list[dict[str, Any]]
) -> None:
    cp = control_plane
    bad = next(c for c in INVALID if c.id == "memory-placement-outside-its-values")
    said = refused(cp, device_class("oc-class-bad", bad.parameters))
    assert f"{DENIED}spec.config[0].opaque.parameters: {driver_words(bad)}" in said
    cp.kubectl("delete", "deviceclass", "oc-class", "--ignore-not-found")
    create(cp, device_class("oc-class", config(memoryPlacement="local")))
    changed = {**cp.get("deviceclass", "oc-class")}
    changed["spec"]["config"][0]["opaque"]["parameters"] = bad.parameters
    said = f"{DENIED}spec.config[0].opaque.parameters: {driver_words(bad)}"
    with pytest.raises(CommandError, match=re.escape(said)):
        cp.kubectl("replace", "-f", "-", stdin=json.dumps(changed))
    cp.kubectl("delete", "deviceclass", "oc-class")


def test_an_object_stored_before_the_policy_is_left_alone(
    control_plane: ControlPlane, policy: list[dict[str, Any]], binding_off: None
) -> None:
    # Stored while the binding is off, as an object from before the chart's upgrade is.
    cp = control_plane
    bad = next(c for c in INVALID if c.id == "strategy-outside-its-values")
    for kind in BUILDERS:
        cp.kubectl("delete", kind, "oc-old", "-n", NAMESPACE, "--ignore-not-found")
        create(cp, BUILDERS[kind]("oc-old", bad.parameters))
    cp.apply(policy[1])
    wait_for(lambda: in_force(cp), "the binding in force", timeout=60, interval=0.2)
    # Updates that leave the configurations alone pass: labels, finalizers, deletion.
    for kind in BUILDERS:
        cp.kubectl("label", kind, "oc-old", "-n", NAMESPACE, "stored=before")
        assert cp.get(kind, "oc-old", NAMESPACE)["metadata"]["labels"] == {"stored": "before"}
    cp.kubectl("delete", "resourceclaim", "oc-old", "-n", NAMESPACE)
    # The claim the resourceclaim controller writes from the old template for a new pod is new:
    # refused, and the pod is told why.
    from_template = pod("oc-old-pod", ON_THE_DRIVERS_NODE)
    from_template["spec"]["resourceClaims"] = [
        {"name": "cpus", "resourceClaimTemplateName": "oc-old"}]  # fmt: skip
    cp.kubectl("delete", "pod", "oc-old-pod", "-n", NAMESPACE, "--ignore-not-found",
               "--grace-period=0", "--force")  # fmt: skip
    cp.create(from_template)
    expected = f"{DENIED}spec.devices.config[1].opaque.parameters: {driver_words(bad)}"
    wait_for(lambda: any(expected in m for m in cp.events(NAMESPACE, "oc-old-pod")),
             "the pod's event", timeout=60, interval=0.5)  # fmt: skip
    assert not [c for c in cp.items("resourceclaims", NAMESPACE)
                if c["metadata"]["name"].startswith("oc-old-pod")]  # fmt: skip
    cp.kubectl("delete", "pod", "oc-old-pod", "-n", NAMESPACE, "--grace-period=0", "--force")
    cp.kubectl("delete", "resourceclaimtemplate", "oc-old", "-n", NAMESPACE)


def prepared_by(case: OpaqueCase) -> str:
    """The node whose driver the case's claim goes to: the external allocator's for a valid
    explicit cpuset, the driver's own placement for any other."""
    try:
        explicit = parse_parameters(json.dumps(case.parameters).encode()).cpuset is not None
    except InvalidInputError:
        explicit = False
    return ON_THE_EXTERNAL_NODE if explicit else ON_THE_DRIVERS_NODE


def pod(name: str, node: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                     "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"claims": [{"name": "cpus"}]}}],
                     "resourceClaims": [{"name": "cpus", "resourceClaimName": name}]}}  # fmt: skip


async def prepare_errors(stack: DriverStack, claims: list[Claim]) -> dict[str, str]:
    kubelet = await stack.kubelet()
    try:
        results = await kubelet.prepare(claims)
    finally:
        await kubelet.close()
    return {uid: result.error for uid, result in results.items()}


async def test_without_the_binding_the_prepare_refuses_every_case_in_the_same_words(
    control_plane: ControlPlane, binding_off: None, stacks: list[DriverStack]
) -> None:
    cp = control_plane
    configs = {ON_THE_DRIVERS_NODE: {}, ON_THE_EXTERNAL_NODE: {"allocator": "external"}}
    for node, fields in configs.items():
        if not cp.items("nodes", selector=f"metadata.name={node}"):
            cp.register_node(node, cpus=64)
        # 64 CPUs in 4 NUMA nodes: room for one CPU of every case's claim.
        stacks.append(DriverStack(node, cp.kubeconfig, fixture="snc", config=fields))
    await asyncio.gather(*(stack.start() for stack in stacks))
    for stack in stacks:
        wait_for(lambda s=stack: complete(slices(cp, s.node), 4), "slices", timeout=60)
    names = {case.id: f"p-{case.id}" for case in INVALID}
    for case in INVALID:
        name = names[case.id]
        cp.kubectl("delete", "pod", name, "-n", NAMESPACE, "--ignore-not-found",
                   "--grace-period=0", "--force")  # fmt: skip
        cp.kubectl("delete", "resourceclaim", name, "-n", NAMESPACE, "--ignore-not-found")
        create(cp, resource_claim(name, case.parameters))
        cp.create(pod(name, prepared_by(case)))
    try:
        for stack in stacks:
            ours = [c for c in INVALID if prepared_by(c) == stack.node]
            claims = {}
            for case in ours:
                name = names[case.id]
                wait_for(lambda n=name: allocation(cp, n), f"{name} allocated", timeout=90)
                uid = cp.get("resourceclaim", name, NAMESPACE)["metadata"]["uid"]
                claims[uid] = case
            errors = await prepare_errors(
                stack, [Claim(NAMESPACE, names[c.id], uid) for uid, c in claims.items()]
            )
            said = {claims[uid].id: error for uid, error in errors.items()}
            assert said.keys() == {c.id for c in ours}
            wrong = {c.id: said[c.id] for c in ours if driver_words(c) not in said[c.id]}
            assert wrong == {}
    finally:
        for name in names.values():
            cp.kubectl("delete", "pod", name, "-n", NAMESPACE, "--ignore-not-found",
                       "--grace-period=0", "--force")  # fmt: skip
            cp.kubectl("delete", "resourceclaim", name, "-n", NAMESPACE, "--ignore-not-found",
                       "--wait=false")  # fmt: skip
