"""Which optional ResourceSlice feature a refusal names, with the messages kube-apiserver 1.37
actually sends, and what the slices look like without it."""

from __future__ import annotations

from typing import Any

import pytest

from dracpu.dra_plugin.cluster.api_features import FeatureSupport

LISTS = {"name": "cpudev000", "attributes": {
    "dra.cpu/numaNodeID": {"int": 0},
    "resource.kubernetes.io/pcieRoot": {"strings": ["pci0000:00"]}}}  # fmt: skip
MAPPING = {
    "name": "cpudevnuma000",
    "capacity": {"dra.cpu/cpu": {"value": "20"}},
    "nodeAllocatableResources": {"cpu": {"mapping": {"capacityKey": "dra.cpu/cpu"}}},
}
NO_GATE_LISTS = (
    'create resourceslice: 422 Unprocessable Entity: ResourceSlice.resource.k8s.io "s" is '
    "invalid: spec.devices[0].attributes[resource.kubernetes.io/pcieRoot]: Invalid value: "
    '"": must specify one of: `int`, `bool`, `string`, `version`, `ints`, `bools`, `strings`'
)
UNDECLARED = (
    'create resourceslice: 403 Forbidden: resourceslices.resource.k8s.io "s" is forbidden: '
    'node "n1" does not support DRANodeAllocatableResources feature'
)
RBAC = (
    "create resourceslice: 403 Forbidden: resourceslices.resource.k8s.io is forbidden: User "
    '"nobody" cannot create resource "resourceslices" in API group "resource.k8s.io"'
)
OTHER_422 = (
    "create resourceslice: 422 Unprocessable Entity: spec.devices[0].name: Invalid value: "
    '"X": a lowercase RFC 1123 label'
)


@pytest.mark.parametrize(
    ("message", "sent", "feature"),
    [
        pytest.param(NO_GATE_LISTS, [LISTS], "listTypeAttributes", id="lists-without-gate"),
        pytest.param(UNDECLARED, [MAPPING], "nodeAllocatableResources", id="node-undeclared"),
        pytest.param(RBAC, [LISTS, MAPPING], None, id="rbac-is-not-a-feature"),
        pytest.param(OTHER_422, [LISTS], None, id="other-invalid-field"),
        pytest.param(NO_GATE_LISTS, [MAPPING], None, id="names-a-feature-not-sent"),
    ],
)
def test_the_refused_feature_is_the_one_the_message_names(
    message: str, sent: list[dict[str, Any]], feature: str | None
) -> None:
    support = FeatureSupport()
    found = support.refused(message, sent)
    assert (found.name if found else None) == feature
    if found:
        assert found.reason == message
        assert support.refused(message, sent) is None  # once only


def test_devices_are_published_without_what_is_missing() -> None:
    support = FeatureSupport()
    assert support.devices([LISTS, MAPPING]) == [LISTS, MAPPING]
    support.refused(NO_GATE_LISTS, [LISTS])
    assert support.devices([LISTS]) == [
        {"name": "cpudev000", "attributes": {"dra.cpu/numaNodeID": {"int": 0}}}
    ]
    assert not support.advanced(support.devices([LISTS]))
    (dropped,) = support.dropped([MAPPING], [{k: v for k, v in MAPPING.items()
                                              if k != "nodeAllocatableResources"}])  # fmt: skip
    assert dropped.gate == "DRANodeAllocatableResources"
    assert "nodeAllocatableResources" not in support.devices([MAPPING])[0]
