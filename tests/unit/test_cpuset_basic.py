"""The Linux CPU list format round-trips through CPUSet."""

import pytest

from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import CPUSetError


@pytest.mark.parametrize(
    ("text", "canonical"),
    [("", ""), ("0-3,8,10-11", "0-3,8,10-11"), ("3,2,1,0", "0-3"), (" 5 ", "5")],
)
def test_canonical_form(text: str, canonical: str) -> None:
    assert CPUSet.parse(text).format() == canonical


@pytest.mark.parametrize("text", ["1,,2", "3-1", "-1", "a", "0-70000"])
def test_bad_lists_are_refused(text: str) -> None:
    with pytest.raises(CPUSetError):
        CPUSet.parse(text)
