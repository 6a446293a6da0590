"""examples/ holds what a user can `kubectl apply` as it is: every file is a
ResourceClaimTemplate of resource.k8s.io/v1 and a Pod using it, naming the chart's DeviceClass,
with the pod's CPU requests equal to the CPUs its claim holds, and a header saying which chart
values its nodes need and what the pod gets (tests/e2e/test_e2e_examples.py applies each file to
the one-node cluster and checks that header against the kernel). No cluster, no helm."""

from __future__ import annotations

import pytest
import yaml
from harness.examples import CHECKS, Example, claims_of, examples
from helm_chart import CHART, schema_node

from dracpu.allocator.validate import refusals

ALL = examples()
IDS = [example.name for example in ALL]


def chart_device_classes() -> set[str]:
    """The DeviceClass names the chart creates, read from its templates (their names are
    literal; the template lines are dropped before reading the YAML)."""
    names = set()
    for template in (CHART / "templates").glob("*.yaml"):
        if "kind: DeviceClass" not in template.read_text():
            continue
        text = "\n".join(line for line in template.read_text().splitlines() if "{{" not in line)
        for document in yaml.safe_load_all(text):
            if isinstance(document, dict) and document.get("kind") == "DeviceClass":
                names.add(document["metadata"]["name"])
    return names


def test_every_device_mode_of_the_chart_has_an_example() -> None:
    modes = {example.chart_values for example in ALL}
    assert () in modes  # grouped by NUMA node, the default
    assert ("driverConfig.groupBy=socket",) in modes
    assert ("driverConfig.groupBy=machine", "driverConfig.allocator=external") in modes
    assert ("driverConfig.cpuDeviceMode=individual",) in modes


def test_the_common_asks_have_an_example() -> None:
    names = {example.name for example in ALL}
    assert {"whole-cores", "spread-across-numa", "numa-local-memory", "aligned-with-gpu"} <= names


@pytest.mark.parametrize("example", ALL, ids=IDS)
def test_a_claim_template_and_a_pod_of_the_served_versions(example: Example) -> None:
    kinds = sorted((d["apiVersion"], d["kind"]) for d in example.documents)
    assert kinds == [("resource.k8s.io/v1", "ResourceClaimTemplate"), ("v1", "Pod")]
    assert example.template["metadata"]["name"]
    assert example.pod["metadata"]["name"]


@pytest.mark.parametrize("example", ALL, ids=IDS)
def test_cpus_come_from_the_charts_device_class(example: Example) -> None:
    classes = {r["deviceClassName"] for r in example.requests()}
    ours = chart_device_classes()
    assert "dra.cpu" in ours
    assert "dra.cpu" in classes, "no request of the chart's CPU DeviceClass"
    if classes - ours:
        assert example.needs, f"{classes - ours} need a `# needs:` line saying what provides them"


@pytest.mark.parametrize("example", ALL, ids=IDS)
def test_the_pod_uses_the_template_in_one_container(example: Example) -> None:
    spec = example.pod["spec"]
    claims = {c["name"]: c for c in spec["resourceClaims"]}
    assert [c["resourceClaimTemplateName"] for c in claims.values()] == [
        example.template["metadata"]["name"]
    ]
    users = example.claimed_containers()
    assert len(users) == 1, "one container per claim: a second one is refused"
    for container in spec["containers"]:
        assert set(claims_of(container)) <= set(claims)


@pytest.mark.parametrize("example", ALL, ids=IDS)
def test_the_pod_requests_the_cpus_its_claim_holds(example: Example) -> None:
    """Pod-level requests, or the claimed container's, equal to the claim: the kubelet and the
    scheduler do not count the claim's CPUs themselves."""
    assert example.pod_cpu_requests() == [str(example.claimed_cpus())]


@pytest.mark.parametrize("example", ALL, ids=IDS)
def test_the_header_says_which_chart_values_and_what_the_pod_gets(example: Example) -> None:
    assert example.header.get("chart"), "a `# chart:` line (or `# chart: (the defaults)`)"
    for item in example.chart_values:
        key, equals, value = item.partition("=")
        assert equals and value, item
        assert schema_node(key) is not None, f"{key} is not a value of the chart"
    expect = example.expect
    assert expect and set(expect) <= set(CHECKS), set(expect) - set(CHECKS)
    if "cpus" in expect:
        assert int(expect["cpus"]) == example.claimed_cpus()
    else:
        assert "cpuset" in expect


@pytest.mark.parametrize("example", ALL, ids=IDS)
def test_the_admission_policy_would_admit_it(example: Example) -> None:
    """`dracpu validate`: the chart's admission check of dra.cpu opaque configurations."""
    assert list(refusals(example.documents)) == []


@pytest.mark.parametrize("example", ALL, ids=IDS)
def test_scaled_to_a_small_node_the_claim_and_the_requests_move_together(
    example: Example,
) -> None:
    """What the e2e tier does to an example bigger than its node."""
    scaled = example.scaled(1)
    assert scaled.claimed_cpus() == 1
    assert scaled.pod_cpu_requests() == ["1"]
    assert example.claimed_cpus() == int(example.expect.get("cpus", 1))  # the file's unchanged
