"""CPU sets in the Linux list format (`0-3,8,10-11`), backed by an int bitmask."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Final

from dracpu.core.errors import CPUSetError
from dracpu.core.names import echo

# Larger than any machine Linux supports (CONFIG_NR_CPUS tops out at 8192); a bound keeps a
# typo such as "0-99999999" from allocating a huge bitmask.
MAX_CPUS: Final = 65536

# ASCII digits only (`\d` takes other scripts' digits too). Numbers are bounded before int():
# a 5,000-digit string would exceed Python's digit limit and raise a bare ValueError.
_ITEM = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_MAX_DIGITS: Final = 6
# The longest list of distinct CPUs below MAX_CPUS is about 400,000 characters.
MAX_TEXT: Final = 1 << 20


class CPUSet:
    """An immutable set of CPU ids. Set algebra is int arithmetic, so it is fast at any size."""

    __slots__ = ("_mask",)

    _mask: int

    def __init__(self, cpus: Iterable[int] = ()) -> None:
        mask = 0
        for cpu in cpus:
            if not 0 <= cpu < MAX_CPUS:
                raise CPUSetError(f"CPU id {cpu} is out of range 0-{MAX_CPUS - 1}")
            mask |= 1 << cpu
        object.__setattr__(self, "_mask", mask)

    @classmethod
    def from_mask(cls, mask: int) -> CPUSet:
        if mask < 0 or mask.bit_length() > MAX_CPUS:
            raise CPUSetError(f"bitmask {mask:#x} does not describe CPUs 0-{MAX_CPUS - 1}")
        result = cls.__new__(cls)
        object.__setattr__(result, "_mask", mask)
        return result

    @classmethod
    def parse(cls, text: str) -> CPUSet:
        """Parse the Linux list format. An empty or blank string is the empty set."""
        if not isinstance(text, str):
            raise CPUSetError(f"CPU list must be a string, not {type(text).__name__}")
        if len(text) > MAX_TEXT:
            raise CPUSetError(f"CPU list of {len(text)} characters; at most {MAX_TEXT}")
        stripped = text.strip(" \t\n")
        if not stripped:
            return EMPTY
        mask = 0
        for raw in stripped.split(","):
            item = raw.strip(" \t\n")
            match = _ITEM.fullmatch(item)
            if match is None:
                what = "empty item" if not item else f"invalid item {echo(item, 24)}"
                raise CPUSetError(f"{what} in CPU list {echo(text)}")
            if max(len(match.group(1)), len(match.group(2) or "")) > _MAX_DIGITS:
                raise CPUSetError(
                    f"CPU in {echo(text)} is beyond the supported maximum {MAX_CPUS - 1}"
                )
            first = int(match.group(1))
            last = int(match.group(2)) if match.group(2) is not None else first
            if last < first:
                raise CPUSetError(f"reversed range {item!r} in CPU list {echo(text)}")
            if last >= MAX_CPUS:
                raise CPUSetError(
                    f"CPU {last} in {echo(text)} is beyond the supported maximum {MAX_CPUS - 1}"
                )
            mask |= ((1 << (last - first + 1)) - 1) << first
        return cls.from_mask(mask)

    @classmethod
    def range(cls, first: int, last: int) -> CPUSet:
        """CPUs first..last inclusive."""
        if first > last:
            return EMPTY
        return cls.parse(f"{first}-{last}")

    @property
    def mask(self) -> int:
        return self._mask

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("CPUSet is immutable")

    def __iter__(self) -> Iterator[int]:
        mask = self._mask
        while mask:
            low = mask & -mask
            yield low.bit_length() - 1
            mask ^= low

    def sorted(self) -> list[int]:
        return list(self)

    def __len__(self) -> int:
        return self._mask.bit_count()

    def __bool__(self) -> bool:
        return self._mask != 0

    def __contains__(self, cpu: object) -> bool:
        return isinstance(cpu, int) and 0 <= cpu < MAX_CPUS and bool(self._mask >> cpu & 1)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CPUSet) and self._mask == other._mask

    def __hash__(self) -> int:
        return hash(self._mask)

    def __or__(self, other: CPUSet) -> CPUSet:
        return CPUSet.from_mask(self._mask | other._mask)

    def __and__(self, other: CPUSet) -> CPUSet:
        return CPUSet.from_mask(self._mask & other._mask)

    def __sub__(self, other: CPUSet) -> CPUSet:
        return CPUSet.from_mask(self._mask & ~other._mask)

    def __xor__(self, other: CPUSet) -> CPUSet:
        return CPUSet.from_mask(self._mask ^ other._mask)

    union = __or__
    intersection = __and__
    difference = __sub__

    def issubset(self, other: CPUSet) -> bool:
        return self._mask & ~other._mask == 0

    def isdisjoint(self, other: CPUSet) -> bool:
        return self._mask & other._mask == 0

    def first(self) -> int:
        """The lowest CPU id; the set must not be empty."""
        if not self._mask:
            raise CPUSetError("empty CPU set has no first CPU")
        return (self._mask & -self._mask).bit_length() - 1

    def last(self) -> int:
        if not self._mask:
            raise CPUSetError("empty CPU set has no last CPU")
        return self._mask.bit_length() - 1

    def format(self) -> str:
        """Canonical Linux list form: ascending, ranges of 2+ CPUs collapsed (`0-3,8`)."""
        return ",".join(
            str(first) if ones == 1 else f"{first}-{first + ones - 1}"
            for first, ones in runs_of(self._mask)
        )

    def __str__(self) -> str:
        return self.format()

    def __repr__(self) -> str:
        return f"CPUSet({self.format()!r})"


EMPTY: Final = CPUSet()


def runs_of(mask: int) -> Iterator[tuple[int, int]]:
    """The runs of set bits of `mask`, lowest first: (first bit, number of bits)."""
    offset = 0
    while mask:
        # Skip the run of zeros, then measure the run of ones.
        zeros = (mask & -mask).bit_length() - 1
        mask >>= zeros
        offset += zeros
        ones = (~mask & (mask + 1)).bit_length() - 1
        yield offset, ones
        mask >>= ones
        offset += ones
