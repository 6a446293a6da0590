"""CPUSet: the Linux list format, canonical output, set algebra, and precise refusals."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dracpu.core.cpuset import MAX_CPUS, CPUSet
from dracpu.core.errors import CPUSetError, InvalidInputError

cpu_ids = st.integers(min_value=0, max_value=4095)
id_sets = st.frozensets(cpu_ids, max_size=200)
# Sets with long runs, as real machines have.
runs = st.lists(st.tuples(cpu_ids, st.integers(0, 300)), max_size=12).map(
    lambda spans: frozenset(c for first, n in spans for c in range(first, min(first + n, 4096)))
)
any_set = st.one_of(id_sets, runs)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("", ""),
        ("   ", ""),
        ("\n", ""),
        ("0", "0"),
        ("0-3,8,10-11", "0-3,8,10-11"),
        ("3,2,1,0", "0-3"),
        (" 5 ", "5"),
        ("0-1,2-3", "0-3"),
        ("0-5,2-3", "0-5"),
        ("7,5-6", "5-7"),
        ("1, 3", "1,3"),
        ("4-4", "4"),
        ("0,2,4", "0,2,4"),
        ("65535", "65535"),
    ],
    ids=lambda v: repr(v),
)
def test_canonical_form(text: str, canonical: str) -> None:
    assert CPUSet.parse(text).format() == canonical


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1,,2", "empty item in CPU list '1,,2'"),
        (",", "empty item in CPU list ','"),
        ("0-3,", "empty item in CPU list '0-3,'"),
        ("3-1", "reversed range '3-1' in CPU list '3-1'"),
        ("0,9-2", "reversed range '9-2' in CPU list '0,9-2'"),
        ("-1", "invalid item '-1' in CPU list '-1'"),
        ("a", "invalid item 'a' in CPU list 'a'"),
        ("0-3,x7", "invalid item 'x7' in CPU list '0-3,x7'"),
        ("1-2-3", "invalid item '1-2-3'"),
        ("0x10", "invalid item '0x10'"),
        ("1.5", "invalid item '1.5'"),
        ("0-70000", "CPU 70000 in '0-70000' is beyond the supported maximum 65535"),
        ("65536", "CPU 65536 in '65536' is beyond the supported maximum 65535"),
        ("0-99999999999999999999", "beyond the supported maximum"),
    ],
    ids=lambda v: repr(v),
)
def test_bad_lists_are_refused_naming_the_offending_text(text: str, message: str) -> None:
    with pytest.raises(CPUSetError) as error:
        CPUSet.parse(text)
    assert message in str(error.value)


def test_cpuset_errors_are_invalid_input() -> None:
    with pytest.raises(InvalidInputError):
        CPUSet.parse("junk")


def test_non_string_is_refused() -> None:
    with pytest.raises(CPUSetError, match="must be a string, not int"):
        CPUSet.parse(7)  # type: ignore[arg-type]


@pytest.mark.parametrize("cpu", [-1, MAX_CPUS, 10**9])
def test_out_of_range_ids_are_refused(cpu: int) -> None:
    with pytest.raises(CPUSetError, match=f"CPU id {cpu} is out of range 0-65535"):
        CPUSet([cpu])


def test_masks_beyond_the_limit_are_refused() -> None:
    with pytest.raises(CPUSetError):
        CPUSet.from_mask(1 << MAX_CPUS)
    with pytest.raises(CPUSetError):
        CPUSet.from_mask(-1)


@given(any_set)
def test_parse_of_format_is_identity(cpus: frozenset[int]) -> None:
    cpuset = CPUSet(cpus)
    assert CPUSet.parse(cpuset.format()) == cpuset
    assert set(cpuset) == cpus


@given(any_set)
def test_format_is_canonical(cpus: frozenset[int]) -> None:
    text = CPUSet(cpus).format()
    # Ascending, no overlapping or adjacent items, ranges only for 2+ CPUs.
    last = -2
    for item in text.split(",") if text else []:
        first, _, end = item.partition("-")
        low, high = int(first), int(end or first)
        assert low > last + 1
        assert high > low if end else True
        last = high


@given(st.lists(cpu_ids, max_size=50), st.randoms())
def test_item_order_and_repeats_do_not_matter(ids: list[int], rnd: object) -> None:
    shuffled = list(ids)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    text = ",".join(str(i) for i in shuffled + ids)
    assert CPUSet.parse(text) == CPUSet(ids)


@given(any_set, any_set)
def test_algebra_matches_python_sets(a: frozenset[int], b: frozenset[int]) -> None:
    x, y = CPUSet(a), CPUSet(b)
    assert set(x | y) == a | b
    assert set(x & y) == a & b
    assert set(x - y) == a - b
    assert set(x ^ y) == a ^ b
    assert set(x.union(y)) == a | b
    assert set(x.intersection(y)) == a & b
    assert set(x.difference(y)) == a - b
    assert x.issubset(y) == (a <= b)
    assert x.isdisjoint(y) == a.isdisjoint(b)
    assert len(x) == len(a)
    assert bool(x) == bool(a)
    assert (x == y) == (a == b)
    assert x.sorted() == sorted(a)
    if a:
        assert x.first() == min(a)
        assert x.last() == max(a)


@given(any_set, cpu_ids)
def test_membership(a: frozenset[int], cpu: int) -> None:
    assert (cpu in CPUSet(a)) == (cpu in a)


def test_membership_of_non_ids() -> None:
    cpus = CPUSet.parse("0-3")
    assert -1 not in cpus
    assert "1" not in cpus
    assert MAX_CPUS + 5 not in cpus


def test_equal_sets_hash_alike() -> None:
    assert hash(CPUSet.parse("0-3")) == hash(CPUSet([3, 2, 1, 0]))
    assert len({CPUSet.parse("0-3"), CPUSet([0, 1, 2, 3])}) == 1


def test_first_and_last_of_empty_set_are_errors() -> None:
    with pytest.raises(CPUSetError, match="empty CPU set"):
        CPUSet().first()
    with pytest.raises(CPUSetError, match="empty CPU set"):
        CPUSet().last()


def test_range_is_inclusive_and_empty_when_reversed() -> None:
    assert CPUSet.range(2, 5).format() == "2-5"
    assert CPUSet.range(5, 2) == CPUSet()


def test_immutable() -> None:
    cpus = CPUSet.parse("1")
    with pytest.raises(AttributeError):
        cpus._mask = 0  # type: ignore[misc]


def test_large_sets_stay_cheap() -> None:
    everything = CPUSet.range(0, MAX_CPUS - 1)
    odd = CPUSet(range(1, MAX_CPUS, 2))
    assert len(everything - odd) == MAX_CPUS // 2
    assert CPUSet.parse(everything.format()) == everything
    assert str(CPUSet.parse("0-1023")) == "0-1023"
    assert repr(CPUSet.parse("0-1,5")) == "CPUSet('0-1,5')"
