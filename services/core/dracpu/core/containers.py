"""One container as every service names it.

The runtime's container id and the pod and container names it belongs to. The allocator binds
a claim to one `Owner` (a restarted container of the same pod and name is the same owner), the
nri-plugin tracks every `Container` the runtime runs, and the api shows both. On the wire the
same five fields travel in the allocator's `ContainerRef` and the nri-plugin's `ContainerView`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

# The five fields, by the names every gRPC message that carries a container gives them.
FIELDS: Final = ("container_id", "pod_uid", "pod_namespace", "pod_name", "container_name")


@dataclass(frozen=True, slots=True)
class Owner:
    """The one container a claim belongs to: a restarted container of the same pod and name
    is the same owner."""

    pod_uid: str
    container_name: str
    pod_namespace: str = ""
    pod_name: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.pod_uid, self.container_name)

    def describe(self) -> str:
        pod = f"{self.pod_namespace}/{self.pod_name}" if self.pod_name else "pod"
        return f"{pod} (uid {self.pod_uid}) container {self.container_name!r}"


@dataclass(frozen=True, slots=True)
class Container:
    """A running (or created) container: its id and its owner."""

    container_id: str
    owner: Owner

    @classmethod
    def of(
        cls,
        container_id: str,
        pod_uid: str,
        pod_namespace: str,
        pod_name: str,
        container_name: str,
    ) -> Container:
        return cls(container_id, Owner(pod_uid, container_name, pod_namespace, pod_name))

    @classmethod
    def of_message(cls, message: Any) -> Container:
        """From any message with the five fields (ContainerRef, ContainerView)."""
        return cls.of(**{name: str(getattr(message, name)) for name in FIELDS})

    def fields(self) -> dict[str, str]:
        """The five fields by their wire names: `ContainerRef(**container.fields())`."""
        owner = self.owner
        return {
            "container_id": self.container_id,
            "pod_uid": owner.pod_uid,
            "pod_namespace": owner.pod_namespace,
            "pod_name": owner.pod_name,
            "container_name": owner.container_name,
        }

    @property
    def pod_uid(self) -> str:
        return self.owner.pod_uid

    @property
    def pod_namespace(self) -> str:
        return self.owner.pod_namespace

    @property
    def pod_name(self) -> str:
        return self.owner.pod_name

    @property
    def container_name(self) -> str:
        return self.owner.container_name
