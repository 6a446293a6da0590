"""What the API-server fake holds: its objects, their resourceVersions, the slice events
watches read, and the switches that make it answer as a server lacking a feature would.

Every field is read and changed with `lock` held; `changed` wakes the watches.
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
from typing import Any

from dracpu.core.errors import ConflictError
from dracpu.dev.apiserver.status_apply import DeviceKey, apply_devices, device_key

Object = dict[str, Any]
ClaimKey = tuple[str, str]  # (namespace, name)
# Requests remembered for tests to read back; a long development run keeps only the newest.
REQUESTS_KEPT = 10_000


def status(code: int, reason: str, message: str) -> Object:
    """A `Status` body as the API server answers a failed request."""
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": reason, "message": message}  # fmt: skip


class Store:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.claims: dict[ClaimKey, Object] = {}
        self.nodes: dict[str, Object] = {}
        self.pods: dict[str, Object] = {}  # by UID; listed only (the uninstall check)
        self.slices: dict[str, Object] = {}
        self.versions = itertools.count(1)
        self.version = 0
        self.requests: list[tuple[str, str]] = []
        # Per request: the Authorization header and the client certificate's common name.
        self.credentials: list[tuple[str, str]] = []
        self.open_watches = 0
        self.events: list[tuple[int, str, Object]] = []  # slices only
        self.compacted = 0
        self.changed = threading.Condition(self.lock)
        # Set when the server stops: open watches end, so no client thread waits on one.
        self.closed = False
        # Gates the real server may lack: a device field silently dropped on write, or writes
        # using a field refused with (code, reason, message).
        self.drop_device_fields: set[str] = set()
        self.refuse: dict[str, tuple[int, str, str]] = {}
        # status.devices: "on"; "dropped" (a gate off: the field silently discarded); "unknown"
        # (a server whose schema lacks it: the apply is refused naming the field).
        self.device_status = "on"
        # (namespace, name) -> entry key -> field manager owning that status.devices entry.
        self.status_owners: dict[ClaimKey, dict[DeviceKey, str]] = {}
        # A claim's UID differing from the apply's: 409 on the precondition, or (True) the 422
        # kube-apiserver 1.37 answers for a server-side apply ("field is immutable").
        self.uid_as_invalid = False
        # Status applies answer 500 while this is positive (decremented per refusal).
        self.fail_status = 0
        # When set, requests without exactly this Authorization header get 401.
        self.require_token = ""
        # A watch from a compacted version: False streams an ERROR event with code 410 (the
        # watch cache's answer); True answers the request itself with 410 Gone (etcd's).
        self.gone_as_status = False
        # The versions /apis/resource.k8s.io lists; empty: the group is not served at all (404).
        self.resource_versions = ["v1beta1", "v1beta2", "v1"]
        # Events created (core/v1, any namespace), and the refusal (code, reason, message) that
        # answers an Event create when set.
        self.pod_events: list[Object] = []
        self.refuse_events: tuple[int, str, str] | None = None

    def log_request(self, method: str, path: str, authorization: str, peer: str) -> None:
        """Remember a request (lock held), and forget the oldest beyond REQUESTS_KEPT."""
        self.requests.append((method, path))
        self.credentials.append((authorization, peer))
        if len(self.requests) > REQUESTS_KEPT:
            del self.requests[:-REQUESTS_KEPT], self.credentials[:-REQUESTS_KEPT]

    def stamp(self, obj: Object) -> Object:
        self.version = next(self.versions)
        obj["metadata"]["resourceVersion"] = str(self.version)
        return obj

    def record(self, kind: str, obj: Object) -> None:
        """A slice event for watchers (call with the lock held, after stamp)."""
        self.events.append((self.version, kind, copy.deepcopy(obj)))
        self.changed.notify_all()

    def put_slice(self, obj: Object, kind: str = "MODIFIED") -> None:
        """Store a slice as someone else would write it."""
        with self.lock:
            self.slices[obj["metadata"]["name"]] = self.stamp(obj)
            self.record(kind, obj)

    def remove_slice(self, name: str) -> None:
        """Delete a slice as someone else (the garbage collector) would."""
        with self.lock:
            obj = self.slices.pop(name)
            self.stamp(obj)
            self.record("DELETED", obj)

    def forget_claim(self, key: ClaimKey) -> Object:
        """Remove a claim and who owns its status entries (lock held)."""
        self.status_owners.pop(key, None)
        return self.claims.pop(key)

    def apply_status(
        self, key: ClaimKey, manager: str, devices: list[Object], force: bool
    ) -> tuple[int, Object]:
        """Server-side apply of status.devices by `manager` (lock held): (code, body)."""
        claim = self.claims[key]
        if self.device_status == "unknown":
            return 500, status(500, "InternalError", "failed to create typed patch object "
                               ".status.devices: field not declared in schema")  # fmt: skip
        allocation = (claim.get("status") or {}).get("allocation") or {}
        allocated = {device_key(r) for r in (allocation.get("devices") or {}).get("results") or []}
        for index, entry in enumerate(devices):
            where = f"status.devices[{index}]"
            if not isinstance(entry, dict):
                return 422, status(422, "Invalid", f"{where}: Invalid value: expected an object")
            if device_key(entry) not in allocated:
                return 422, status(422, "Invalid", f"ResourceClaim.resource.k8s.io {key[1]!r} "
                                   f"is invalid: {where}: Invalid value: must be an allocated "
                                   "device in the claim")  # fmt: skip
            if len(entry.get("conditions") or []) > 8:
                return 422, status(422, "Invalid", f"{where}.conditions: Too many: must have "
                                   "at most 8 items")  # fmt: skip
            if len(json.dumps(entry.get("data") or {}, separators=(",", ":"))) > 10 * 1024:
                return 422, status(422, "Invalid", f"{where}.data: Too long")
        try:
            applied = apply_devices(
                (claim.get("status") or {}).get("devices") or [],
                self.status_owners.get(key, {}),
                manager,
                devices,
                force=force,
            )
        except ConflictError as exc:
            return 409, status(409, "Conflict", str(exc))
        claim_status = claim.setdefault("status", {})
        merged, self.status_owners[key] = applied.devices, applied.owners
        if self.device_status == "dropped":
            merged = []
            self.status_owners[key] = {}
        if merged:
            claim_status["devices"] = merged
        else:
            claim_status.pop("devices", None)
        self.stamp(claim)
        return 200, claim

    def compact(self) -> None:
        """Forget history: watches from older versions get 410 Gone."""
        with self.lock:
            self.compacted = self.version + 1  # even the newest version seen is gone
            self.version = next(self.versions)
            self.events.clear()
