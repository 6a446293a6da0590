"""Kubernetes quantities: resource.Quantity's grammar (signs, decimal and binary SI suffixes,
decimal exponents), values rounded up to a nano as the API server stores them, magnitudes past
2^63-1 refused; the whole-number, CPU and byte readings built on it."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dracpu.core.errors import InvalidInputError
from dracpu.core.quantity import (
    BINARY_SI,
    DECIMAL_SI,
    MAX_MAGNITUDE,
    byte_count,
    cpu_count,
    format_quantity,
    parse_quantity,
    whole_quantity,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("4", "4"),
        ("+4", "4"),
        ("4000m", "4"),
        ("1k", "1000"),
        ("2Ki", "2048"),
        ("1e3", "1000"),
        ("1E3", "1000"),
        ("1e+3", "1000"),
        ("1e-3", "0.001"),
        ("2E", "2e18"),
        ("1.5", "1.5"),
        (".5", "0.5"),
        ("5.", "5"),
        ("1.G", "1e9"),
        ("250m", "0.25"),
        ("-3", "-3"),
        ("-0", "0"),
        ("007", "7"),
        ("1.5Gi", "1610612736"),
        ("0.5Ki", "512"),
        ("1n", "0.000000001"),
        ("3u", "0.000003"),
        ("0.1n", "0.000000001"),
        ("-0.1n", "-0.000000001"),
        ("1e-99999", "0.000000001"),
        ("0e999999999", "0"),
        ("9223372036854775807", "9223372036854775807"),
        ("7Ei", str(7 * 2**60)),
    ],
)
def test_quantities(text: str, value: str) -> None:
    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "four",
        "4 m",
        "4mm",
        "4Kb",
        "1e",
        "--4",
        "0x10",
        "+",
        ".",
        "1K",
        "1ki",
        "1Ki3",
        "1e3k",
        "1e1.5",
        " 2 ",
        "4\n",
        "\uff11",
        "\u0663",
    ],
)
def test_not_quantities(text: str) -> None:
    with pytest.raises(InvalidInputError, match="is not a quantity"):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("9223372036854775808", "above 2"),
        ("9" * 5000, "above 2"),
        ("8Ei", "above 2"),
        ("1e99999999", "above 2"),
        ("1e2147483648", "32 bits"),
        ("1e-99999999999", "32 bits"),
    ],
)
def test_out_of_range(text: str, why: str) -> None:
    with pytest.raises(InvalidInputError, match=why):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [("4", 4), ("4000m", 4), ("0", 0), ("2Ki", 2048), ("-3", -3)],
)
def test_whole_quantities(text: str, value: int) -> None:
    assert whole_quantity(text, "here") == value


@pytest.mark.parametrize(
    ("text", "message"),
    [("1500m", "here: '1500m' is not a whole number"), ("1.5", "not a whole number"),
     ("x", "here: 'x' is not a quantity"), (" 2 ", "is not a quantity")],
)  # fmt: skip
def test_not_whole_quantities(text: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        whole_quantity(text, "here")


@pytest.mark.parametrize(
    ("text", "message"),
    [("0", "must be positive"), ("-1", "must be positive"), ("1500m", "whole number"),
     ("70000", "more than any node has")],
)  # fmt: skip
def test_cpu_counts_are_positive_whole_numbers(text: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        cpu_count(text, "here")
    assert cpu_count("3000m", "here") == 3


def test_byte_counts_name_where_and_refuse_fractions() -> None:
    assert byte_count("1Gi", "--memory") == 2**30
    assert byte_count("0", "--memory") == 0
    with pytest.raises(InvalidInputError, match="--memory: must be a positive whole number"):
        byte_count("0", "--memory", positive=True)
    with pytest.raises(InvalidInputError, match="--memory: 'x' is not a quantity"):
        byte_count("x", "--memory")


@pytest.mark.parametrize(
    ("value", "text"),
    [(0, "0"), (4, "4"), (1500, "1500"), (2000, "2k"), (Decimal("1.5"), "1500m"),
     (Decimal("-0.25"), "-250m"), (Decimal("1e-9"), "1n"), (10**18, "1E")],
)  # fmt: skip
def test_canonical_form(value: Decimal | int, text: str) -> None:
    assert format_quantity(value) == text


# Every value the API server stores: whole nanos within +-(2^63-1).
NANOS = st.integers(-(2**63 - 1) * 10**9, (2**63 - 1) * 10**9).map(lambda n: Decimal(n).scaleb(-9))


@given(NANOS)
def test_format_then_parse_gives_the_value_back(value: Decimal) -> None:
    assert parse_quantity(format_quantity(value)) == value


@given(
    sign=st.sampled_from(["", "+", "-"]),
    whole=st.text("0123456789", max_size=6),
    fraction=st.none() | st.text("0123456789", max_size=6),
    suffix=st.sampled_from([*DECIMAL_SI, *BINARY_SI]) | st.integers(-12, 12).map(lambda e: f"e{e}"),
)
def test_every_spelling_reads_as_its_arithmetic_value(
    sign: str, whole: str, fraction: str | None, suffix: str
) -> None:
    if not whole and not fraction:
        return
    text = f"{sign}{whole}{'' if fraction is None else '.' + fraction}{suffix}"
    number = Decimal(f"{whole or 0}.{fraction or ''}")
    if suffix in BINARY_SI:
        exact = number * 2 ** BINARY_SI[suffix]
    else:
        exact = number.scaleb(int(suffix[1:]) if suffix[:1] == "e" else DECIMAL_SI[suffix])
    nanos = exact.scaleb(9)
    rounded = Decimal(int(nanos) + (nanos != int(nanos))).scaleb(-9)  # up, away from zero
    expected = -rounded if sign == "-" else rounded
    if rounded > MAX_MAGNITUDE:
        with pytest.raises(InvalidInputError, match="above 2"):
            parse_quantity(text)
    else:
        assert parse_quantity(text) == expected
