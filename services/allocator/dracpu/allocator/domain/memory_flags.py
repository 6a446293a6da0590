"""The memory a command-line claim asks for: `--memory QUANTITY` and each `--hugepages
SIZE=QUANTITY`, read the same way by `dracpu simulate` and `dracpu dev claim`."""

from __future__ import annotations

from collections.abc import Sequence

from dracpu.core.driver import MEMORY_CAPACITY, hugepages_capacity
from dracpu.core.errors import InvalidInputError
from dracpu.core.memory import binary_quantity
from dracpu.core.quantity import byte_count

SMALLEST_PAGE = 4096


def memory_flags(memory: str | None, hugepages: Sequence[str]) -> dict[str, int]:
    """Bytes wanted per capacity of a memory device (dra.cpu/memory for `--memory`,
    dra.cpu/hugepages<size> for each page size), in the flags' order. A page size is any power
    of two of at least 4Ki however it is written (2048Ki is 2Mi); the amount is a whole number
    of its pages. Bad input raises InvalidInputError naming the flag."""
    wanted: dict[str, int] = {}
    if memory is not None:
        wanted[MEMORY_CAPACITY] = byte_count(memory, "--memory", positive=True)
    for entry in hugepages:
        flag = f"--hugepages {entry}"
        size, sep, amount = entry.partition("=")
        if not sep or not size or not amount:
            raise InvalidInputError(f"{flag}: expected SIZE=QUANTITY, e.g. 2Mi=64Mi")
        page = byte_count(size, flag, positive=True)
        if page & (page - 1) or page < SMALLEST_PAGE:
            raise InvalidInputError(
                f"{flag}: page size {size} is not a power of two of at least 4Ki"
            )
        capacity = hugepages_capacity(binary_quantity(page))
        if capacity in wanted:
            raise InvalidInputError(
                f"--hugepages: page size {binary_quantity(page)} is given twice"
            )
        wanted[capacity] = byte_count(amount, flag, positive=True)
        if wanted[capacity] % page:
            raise InvalidInputError(
                f"{flag}: {amount} is not a whole number of {binary_quantity(page)} pages"
            )
    return wanted
