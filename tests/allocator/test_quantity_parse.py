"""Consumed capacity arrives as a Kubernetes quantity string; only positive whole CPU counts
are accepted."""

from __future__ import annotations

from decimal import Decimal

import pytest

from dracpu.allocator.domain.quantity import cpu_count, parse_quantity
from dracpu.core.errors import InvalidInputError


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("4", "4"),
        ("+4", "4"),
        ("4000m", "4"),
        ("1k", "1000"),
        ("2Ki", "2048"),
        ("1e3", "1000"),
        ("1.5", "1.5"),
        (".5", "0.5"),
        ("5.", "5"),
        ("250m", "0.25"),
        ("-3", "-3"),
    ],
)
def test_quantities(text: str, value: str) -> None:
    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize("text", ["", "four", "4 m", "4mm", "4Kb", "1e", "--4", "0x10"])
def test_not_quantities(text: str) -> None:
    with pytest.raises(InvalidInputError, match="is not a quantity"):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [("0", "must be positive"), ("-1", "must be positive"), ("1500m", "whole number")],
)
def test_cpu_counts_are_positive_whole_numbers(text: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        cpu_count(text, "here")
    assert cpu_count("3000m", "here") == 3
