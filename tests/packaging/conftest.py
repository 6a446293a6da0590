"""Fixtures of the packaging tests: the real helm binary, built from its Go module once."""

from __future__ import annotations

from pathlib import Path

import pytest
from helm_chart import ensure_helm


@pytest.fixture(scope="session")
def helm() -> Path:
    binary, why_not = ensure_helm()
    if binary is None:
        pytest.skip(why_not)
    return binary
