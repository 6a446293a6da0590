"""Server-side apply of status.devices as the API server merges that list-map, the merge the
API-server fake answers an apply with."""

from __future__ import annotations

from typing import Any

import pytest

from dracpu.core.errors import ConflictError
from dracpu.dev.apiserver.status_apply import apply_devices, device_key


def entry(device: str, ready: str = "True", share: str = "") -> dict[str, Any]:
    found: dict[str, Any] = {"driver": "dra.cpu", "pool": "node", "device": device}
    if share:
        found["shareID"] = share
    found["conditions"] = [{"type": "Ready", "status": ready}]
    return found


OURS, THEIRS = "dra.cpu", "other-controller"


@pytest.mark.parametrize(
    ("current", "owners", "applied", "devices", "owned"),
    [
        pytest.param([], {}, [entry("a")], [entry("a")], {"a": OURS}, id="first-apply"),
        pytest.param(
            [entry("a", "False")],
            {"a": OURS},
            [entry("a")],
            [entry("a")],
            {"a": OURS},
            id="own-entry-replaced",
        ),
        pytest.param(
            [entry("a"), entry("b")],
            {"a": OURS, "b": OURS},
            [entry("b")],
            [entry("b")],
            {"b": OURS},
            id="own-entry-no-longer-named-removed",
        ),
        pytest.param(
            [entry("x")],
            {"x": THEIRS},
            [entry("a")],
            [entry("x"), entry("a")],
            {"x": THEIRS, "a": OURS},
            id="other-managers-entry-kept",
        ),
        pytest.param(
            [entry("a"), entry("x")],
            {"a": OURS, "x": THEIRS},
            [],
            [entry("x")],
            {"x": THEIRS},
            id="empty-apply-removes-only-own",
        ),
    ],
)
def test_an_apply_replaces_the_managers_entries_and_leaves_the_others(
    current: list[dict[str, Any]],
    owners: dict[str, str],
    applied: list[dict[str, Any]],
    devices: list[dict[str, Any]],
    owned: dict[str, str],
) -> None:
    by_key = {device_key(entry(name)): manager for name, manager in owners.items()}
    result = apply_devices(current, by_key, OURS, applied, force=False)
    assert result.devices == devices
    assert result.owners == {device_key(entry(n)): m for n, m in owned.items()}


def test_an_entry_another_manager_owns_is_refused_naming_it_unless_forced() -> None:
    owners = {device_key(entry("x")): THEIRS}
    with pytest.raises(ConflictError, match=f'conflict with "{THEIRS}": .status.devices'):
        apply_devices([entry("x")], owners, OURS, [entry("x", "False")], force=False)
    forced = apply_devices([entry("x")], owners, OURS, [entry("x", "False")], force=True)
    assert forced.devices == [entry("x", "False")]
    assert forced.owners == {device_key(entry("x")): OURS}


def test_entries_of_one_device_with_different_share_ids_are_different_entries() -> None:
    first = apply_devices([], {}, OURS, [entry("a", share="s1")], force=False)
    second = apply_devices(
        first.devices, first.owners, THEIRS, [entry("a", share="s2")], force=False
    )
    assert second.devices == [entry("a", share="s1"), entry("a", share="s2")]
