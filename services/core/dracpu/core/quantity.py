"""Kubernetes resource quantities (`4`, `4000m`, `1.5k`, `2Ki`, `1e3`) as exact decimals.

The grammar is resource.Quantity's (k8s.io/apimachinery pkg/api/resource/quantity.go):

    quantity        ::= signedNumber suffix
    signedNumber    ::= number | sign number          sign ::= "+" | "-"
    number          ::= digits | digits "." digits | digits "." | "." digits
    suffix          ::= binarySI | decimalExponent | decimalSI
    binarySI        ::= Ki | Mi | Gi | Ti | Pi | Ei
    decimalSI       ::= n | u | m | "" | k | M | G | T | P | E
    decimalExponent ::= ("e" | "E") sign? digits      (an exponent fitting 32 bits)

ASCII digits only, no surrounding spaces. As the API server stores it, a value is rounded up
(away from zero) to a whole nano (1n); where the API server caps a magnitude above 2^63-1, this
parser refuses it: no quantity the API server stores is that large.
"""

from __future__ import annotations

import re
from decimal import MAX_EMAX, MIN_EMIN, ROUND_UP, Context, Decimal, InvalidOperation

from dracpu.core.cpuset import MAX_CPUS
from dracpu.core.errors import InvalidInputError
from dracpu.core.names import echo

MAX_MAGNITUDE = Decimal(2**63 - 1)
NANO = Decimal("1e-9")
_MAX_EXPONENT = 2**31 - 1

_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<whole>[0-9]*)(?:\.(?P<fraction>[0-9]*))?"
    r"(?:[eE](?P<exponent>[+-]?[0-9]+)|(?P<suffix>[KMGTPE]i|[numkMGTPE]))?",
    re.ASCII,
)

DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


def _not_a_quantity(text: object, why: str = "") -> InvalidInputError:
    return InvalidInputError(f"{echo(text)} is not a quantity{f': {why}' if why else ''}")


def parse_quantity(text: str) -> Decimal:
    """The exact value of `text`, rounded up to a whole nano as the API server stores it;
    InvalidInputError for anything outside the grammar or the range."""
    if not isinstance(text, str):
        raise _not_a_quantity(text)
    match = _QUANTITY.fullmatch(text)
    if match is None or not (match["whole"] or match["fraction"]):
        raise _not_a_quantity(text)
    exponent = 0
    if match["exponent"] is not None:
        digits = match["exponent"].lstrip("+-").lstrip("0")
        if len(digits) > 10 or int(digits or "0") > _MAX_EXPONENT:
            raise _not_a_quantity(text, "its exponent does not fit 32 bits")
        exponent = int(match["exponent"])
    elif match["suffix"] in DECIMAL_SI:
        exponent = DECIMAL_SI[match["suffix"]]
    # Enough precision for every digit of the text: each step below is exact.
    context = Context(prec=len(text) + 80, Emax=MAX_EMAX, Emin=MIN_EMIN)
    number = Decimal(f"{match['whole'] or '0'}.{match['fraction'] or ''}E{exponent}")
    if number.is_zero():
        return Decimal(0)
    if number.adjusted() > 18:  # past 10^19 > 2^63-1 whatever the suffix
        raise _not_a_quantity(text, "its magnitude is above 2^63-1")
    if match["suffix"] in BINARY_SI:
        number = context.multiply(number, Decimal(2 ** BINARY_SI[match["suffix"]]))
    try:
        value = number.quantize(NANO, rounding=ROUND_UP, context=context)
    except InvalidOperation:
        raise _not_a_quantity(text) from None
    if value > MAX_MAGNITUDE:
        raise _not_a_quantity(text, "its magnitude is above 2^63-1")
    return -value if match["sign"] == "-" else value


def format_quantity(value: Decimal | int) -> str:
    """`value` in the API server's canonical decimal form: the largest decimal SI suffix that
    leaves a whole number (`1500m`, `4`, `2k`), `0` for zero. Whole nanos within the range
    only; anything else is a ValueError (a programming error, not an input)."""
    value = Decimal(value)
    if value.is_zero():
        return "0"
    if abs(value) > MAX_MAGNITUDE or value != value.quantize(NANO, rounding=ROUND_UP):
        raise ValueError(f"{value} is not a quantity the API server stores")
    for suffix, exponent in sorted(DECIMAL_SI.items(), key=lambda item: -item[1]):
        scaled = value.scaleb(-exponent)
        if scaled == scaled.to_integral_value():
            return f"{int(scaled)}{suffix}"
    raise AssertionError("a whole nano is always a whole number of n")  # pragma: no cover


def whole_quantity(text: str, where: str) -> int:
    """A quantity that must be a whole number (`4`, `4000m`, `2Ki`); the error names
    `where`."""
    try:
        value = parse_quantity(text)
    except InvalidInputError as exc:
        raise InvalidInputError(f"{where}: {exc}") from None
    if value != value.to_integral_value():
        raise InvalidInputError(f"{where}: {echo(text)} is not a whole number")
    return int(value)


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
