"""Fixtures of the packaging tests: the real helm binary and docker compose's own file loader,
both built from their Go modules."""

from __future__ import annotations

from pathlib import Path

import pytest
from helm_chart import ensure_compose_loader, ensure_helm


@pytest.fixture(scope="session")
def helm() -> Path:
    binary, why_not = ensure_helm()
    if binary is None:
        pytest.skip(why_not)
    return binary


@pytest.fixture(scope="session")
def compose_loader() -> Path:
    binary, why_not = ensure_compose_loader()
    if binary is None:
        pytest.skip(why_not)
    return binary
