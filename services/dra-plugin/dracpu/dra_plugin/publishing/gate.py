"""Whether the node's devices may be published now: the API server has what they need
(`cluster.api_prerequisites`), and the kubelet's own CPU or Memory Manager leaves containers'
cpusets to this driver (`kubelet.resource_managers`). Each check answers None when it lets
publishing go on, else the reason it does not."""

from __future__ import annotations

from dracpu.core.prerequisites import DEVICE_TAINTS as TAINTS_VERDICT
from dracpu.dra_plugin.cluster.api_features import DEVICE_TAINTS, FeatureSupport
from dracpu.dra_plugin.cluster.api_prerequisites import APIPrerequisites
from dracpu.dra_plugin.kubelet.resource_managers import ResourceManagers
from dracpu.pb.allocator.v1 import allocator_pb2


class PublishGate:
    def __init__(
        self,
        features: FeatureSupport,
        prerequisites: APIPrerequisites | None,
        resource_managers: ResourceManagers | None,
    ) -> None:
        self.features = features
        self.prerequisites = prerequisites
        self.resource_managers = resource_managers

    async def api_refusal(self, devices: allocator_pb2.DeviceList) -> str | None:
        """Why the API server cannot take these devices yet (a device no claim can be
        allocated only hides why pods stay Pending); a server that drops device taints marks
        them lacking and lets publishing go on."""
        checks = self.prerequisites
        if checks is None:
            return None
        shared = any(d.allow_multiple_allocations for d in devices.devices)
        if await checks.satisfied(shared):
            if checks.taints_kept is False:
                verdict = checks.prerequisites.get(TAINTS_VERDICT)
                self.features.lacking(
                    DEVICE_TAINTS, verdict.message if verdict else "",
                    "the API server lacks device taints; publishing without them",
                )  # fmt: skip
            return None
        missing = [p.message for p in checks.prerequisites.all() if not p.ok]
        return "; ".join(missing) or "the API server's prerequisites unknown"

    def kubelet_refusal(self) -> str | None:
        """Why the kubelet does not leave containers' cpusets to this driver (its
        checkpoints read again)."""
        managers = self.resource_managers
        if managers is None or managers.allow_publishing():
            return None
        return "; ".join(managers.missing())

    def taints_seen_dropped(self) -> None:
        """A real write showed the server drops taints before its check answered: one
        verdict, one Event."""
        checks = self.prerequisites
        if not self.features.supports(DEVICE_TAINTS) and checks and checks.taints_kept is not False:
            checks.taints_dropped()
