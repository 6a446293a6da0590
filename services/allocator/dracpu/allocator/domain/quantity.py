"""Kubernetes resource quantities (`4`, `4000m`, `1k`, `2Ki`, `1e3`) as exact decimals."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from dracpu.core.cpuset import MAX_CPUS
from dracpu.core.errors import InvalidInputError
from dracpu.core.names import echo

# ASCII digits, full match (a trailing newline is not part of a quantity), and bounded: the
# API server refuses quantities with more than 18 significant digits or an exponent past 3
# digits; these bounds only keep parsing cheap and exact.
_QUANTITY = re.compile(
    r"([+-]?(?:[0-9]{1,40}(?:\.[0-9]{0,40})?|\.[0-9]{1,40}))([eE][+-]?[0-9]{1,3}|[KMGTPE]i|[numkMGTPE])?"
)
MAX_TEXT = 64

_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def parse_quantity(text: str) -> Decimal:
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        raise InvalidInputError(f"{echo(text)} is not a quantity")
    match = _QUANTITY.fullmatch(text.strip(" "))
    if match is None:
        raise InvalidInputError(f"{echo(text)} is not a quantity")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        if suffix[:1] in ("e", "E"):
            return Decimal(number) * (Decimal(10) ** int(suffix[1:]))
        return Decimal(number) * _SUFFIX[suffix]
    except (InvalidOperation, OverflowError, ValueError):
        raise InvalidInputError(f"{echo(text)} is not a quantity") from None


def byte_count(text: str, where: str, *, positive: bool = False) -> int:
    """A whole number of bytes written as a quantity (0 allowed unless `positive`); an error
    names `where`."""
    try:
        value = parse_quantity(text)
    except InvalidInputError as exc:
        raise InvalidInputError(f"{where}: {exc}") from None
    if value < (1 if positive else 0) or value != value.to_integral_value():
        adjective = "a positive whole" if positive else "a whole"
        raise InvalidInputError(f"{where}: must be {adjective} number of bytes, got {text}")
    return int(value)


def cpu_count(text: str, where: str) -> int:
    """A consumed CPU capacity: a positive whole number of CPUs."""
    value = parse_quantity(text)
    if value <= 0:
        raise InvalidInputError(f"{where}: CPU capacity must be positive, got {text}")
    if value != value.to_integral_value():
        raise InvalidInputError(f"{where}: CPU capacity must be a whole number, got {text}")
    if value > MAX_CPUS:
        raise InvalidInputError(f"{where}: CPU capacity {text} is more than any node has")
    return int(value)
