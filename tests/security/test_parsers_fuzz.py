"""The parsers that read what others wrote (a cpuset, a quantity, a container's DRA env, an
opaque claim config, the names a kubelet sends) never fail with anything but a precise
DracpuError, whatever the input: fuzzed with hypothesis."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dracpu.allocator.domain.opaque import parse_parameters
from dracpu.core import names
from dracpu.core.cpuset import CPUSet
from dracpu.core.documents import load_json, load_yaml
from dracpu.core.errors import DracpuError
from dracpu.core.quantity import cpu_count, parse_quantity
from dracpu.nri_plugin.state.claim_env import parse_claim_env

pytestmark = pytest.mark.security

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text that looks like the real thing often enough to get past the first check.
CPU_TEXT = st.one_of(
    st.text(),
    st.text(alphabet="0123456789-, \n\t\u0663\uff11", max_size=40),
    st.builds(lambda n: "1" * n, st.integers(0, 6000)),
)
QUANTITY_TEXT = st.one_of(
    st.text(),
    st.text(alphabet="0123456789.+-eEkKMGiTPmnu \n\u0661", max_size=30),
    st.builds(lambda n: "9" * n, st.integers(0, 6000)),
)
ENV_ENTRY = st.one_of(
    st.text(),
    st.builds(lambda uid, cpus: f"DRA_CPUSET_{uid}={cpus}", st.text(max_size=20), CPU_TEXT),
    st.just("DRA_CPUSET_x"),
)
JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
CPU_CONFIG = st.fixed_dictionaries(
    {"apiVersion": st.sampled_from(["v1alpha1", "v1", 3])},
    optional={"cpuConfig": st.dictionaries(st.text(max_size=12), JSON_VALUE, max_size=4)},
)
PARAMETERS = st.one_of(
    st.binary(max_size=200),
    JSON_VALUE.map(lambda v: json.dumps(v).encode()),
    CPU_CONFIG.map(lambda v: json.dumps(v).encode()),
    st.builds(lambda n: b"[" * n + b"]" * n, st.integers(0, 100_000)),
)


def precise(call: object, *args: object) -> None:
    try:
        call(*args)  # type: ignore[operator]
    except DracpuError as exc:
        assert len(str(exc)) < 2048, "an error message must not echo a huge input"


@FUZZ
@given(CPU_TEXT)
def test_cpuset_parse(text: str) -> None:
    precise(CPUSet.parse, text)


@FUZZ
@given(QUANTITY_TEXT)
def test_quantity_parse(text: str) -> None:
    precise(parse_quantity, text)
    precise(cpu_count, text, "where")


@FUZZ
@given(st.lists(ENV_ENTRY, max_size=6))
def test_claim_env_parse(env: list[str]) -> None:
    precise(parse_claim_env, env)


@FUZZ
@given(PARAMETERS)
def test_opaque_config_parse(raw: bytes) -> None:
    precise(parse_parameters, raw)


@FUZZ
@given(st.one_of(st.text(), st.builds(lambda n: "a" * n, st.integers(0, 3_000_000))))
def test_names(text: str) -> None:
    for check in (
        names.check_namespace,
        names.check_object_name,
        names.check_uid,
        names.check_request_name,
    ):
        precise(check, text)


@FUZZ
@given(st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
def test_documents(data: bytes) -> None:
    precise(load_json, data, "doc")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return
    precise(load_yaml, text, "doc")


@pytest.mark.parametrize(
    ("text", "accepted"),
    [
        ("0-3", True),
        ("\u0663", False),
        ("\uff11", False),
        ("3\n", True),  # sysfs files end with a newline
        ("1" * 5000, False),
    ],
    ids=["plain", "arabic-indic-digit", "fullwidth-digit", "sysfs-newline", "5000-digits"],
)
def test_cpuset_digits(text: str, accepted: bool) -> None:
    if accepted:
        CPUSet.parse(text)
    else:
        with pytest.raises(DracpuError):
            CPUSet.parse(text)


@pytest.mark.parametrize(
    "text",
    ["4\n", "\uff11", "\u0663", "9" * 5000, "1e99999999"],
    ids=["newline", "fullwidth", "arabic", "5000-digits", "huge-exponent"],
)
def test_quantities_refused(text: str) -> None:
    with pytest.raises(DracpuError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("check", "text"),
    [
        (names.check_uid, "x\n"),
        (names.check_uid, "a/b"),
        (names.check_uid, "a" * 129),
        (names.check_namespace, "../x"),
        (names.check_namespace, "T"),
        (names.check_object_name, "cpus-1/../../../../tmp/victim"),
        (names.check_object_name, "a" * 254),
        (names.check_request_name, "a/b/c"),
    ],
    ids=[
        "uid-newline",
        "uid-slash",
        "uid-long",
        "ns-dotdot",
        "ns-upper",
        "name-traversal",
        "name-long",
        "request-two-slashes",
    ],
)
def test_names_refused(check: object, text: str) -> None:
    with pytest.raises(DracpuError) as refused:
        check(text)  # type: ignore[operator]
    assert len(str(refused.value)) < 300


def test_two_entries_for_one_claim_are_refused() -> None:
    with pytest.raises(DracpuError, match="twice"):
        parse_claim_env(["DRA_CPUSET_u=1", "DRA_CPUSET_u=2"])
