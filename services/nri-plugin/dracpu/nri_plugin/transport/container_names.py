"""The name a runtime gives a container in its pod, wherever the runtime keeps it."""

from __future__ import annotations

import json

from dracpu.pb.nri import api_pb2

# Where a runtime that leaves Container.name empty still says the container's name: the
# kubelet's label, and CRI-O's record of the CRI metadata (a JSON object with "name"). CRI-O
# 1.34 fills Container.name only from an `io.kubernetes.container.name` annotation.
NAME_LABEL = "io.kubernetes.container.name"
CRIO_METADATA = "io.kubernetes.cri-o.Metadata"


def container_name(ctr: api_pb2.Container) -> str:
    """The container's name in its pod: NRI's name, else the kubelet's label, else the CRI
    metadata name CRI-O keeps in the container's annotations."""
    if ctr.name:
        return str(ctr.name)
    if ctr.labels.get(NAME_LABEL):
        return str(ctr.labels[NAME_LABEL])
    metadata = ctr.annotations.get(CRIO_METADATA, "")
    if metadata:
        try:
            name = json.loads(metadata).get("name", "")
        except (ValueError, AttributeError):
            name = ""
        if isinstance(name, str):
            return name
    return ""
