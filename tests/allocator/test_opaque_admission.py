"""What no node accepts in a `dra.cpu` opaque configuration, as the driver refuses it: the
table of harness.opaque_cases through the parser and the rules, the CEL the chart's admission
policy is generated with held to the same definitions, and `dracpu validate` giving the same
verdicts on whole objects.

The same table runs against a real API server with the chart's policy in
tests/controlplane/test_cp_opaque_admission.py.
"""

from __future__ import annotations

import json
import re
import string
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from harness.opaque_cases import CASES, INVALID, OpaqueCase, config, named_field
from hypothesis import given
from hypothesis import strategies as st

from dracpu.allocator.claims.admission import object_refusals, parameters_refusal
from dracpu.allocator.domain import opaque_words as words
from dracpu.allocator.domain.opaque import (
    CPU_CONFIG_KEY,
    CPUSET_KEY,
    FROM_CLAIM,
    OpaqueConfig,
    cpuset_refusal,
    parse_configs,
)
from dracpu.allocator.domain.opaque_schema import CPU_CONFIG, PARAMETERS
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import CPUSetError


def raw(parameters: object) -> bytes:
    return json.dumps(parameters).encode()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_case_gets_its_verdict_and_field_from_the_driver(case: OpaqueCase) -> None:
    refusal = parameters_refusal(raw(case.parameters))
    assert named_field(refusal) == case.field, refusal
    if refusal:
        assert refusal.startswith(words.PREFIX) and "\n" not in refusal


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        pytest.param(config(strategy="zigzag"),
                     "opaque config: cpuConfig.strategy: 'zigzag' is not one of packed, spread",
                     id="value-outside-an-enum"),
        pytest.param(config(fullPCPUsOnly="yes"),
                     "opaque config: cpuConfig.fullPCPUsOnly: 'yes' is not a boolean (true or "
                     "false)", id="string-for-a-boolean"),
        pytest.param(config(stratgy="spread"),
                     "opaque config: unknown field 'cpuConfig.stratgy' (did you mean "
                     "'cpuConfig.strategy'?)", id="a-typo-gets-the-nearest-key"),
        pytest.param(config(colour="blue"),
                     "opaque config: unknown field 'cpuConfig.colour' (known fields of cpuConfig: "
                     "cpuset, strategy, fullPCPUsOnly, distributeAcrossNUMA, groupSize, "
                     "alignUncoreCache, isolated, memoryPlacement, sharedPool)",
                     id="no-near-key-lists-all"),
        pytest.param(config(sharedPool="both"),
                     "opaque config: cpuConfig.sharedPool: 'both' is not one of include, exclude",
                     id="shared-pool-names-the-field-and-its-values"),
        pytest.param({"apiVersion": "v1alpha1", "cpuconfig": {}},
                     "opaque config: unknown field 'cpuconfig' (did you mean 'cpuConfig'?)",
                     id="top-level-letter-case"),
        pytest.param({"cpuConfig": {}},
                     "opaque config: missing field 'apiVersion' (supported: v1alpha1)",
                     id="no-api-version"),
        pytest.param({"apiVersion": 2, "cpuConfig": {}},
                     "opaque config: unsupported apiVersion 2 (supported: v1alpha1)",
                     id="api-version-a-number"),
        pytest.param(config(distributeAcrossNUMA=True, groupSize=1.5),
                     "opaque config: cpuConfig.groupSize: a decimal number is not an integer >= 1",
                     id="decimal-group-size"),
        pytest.param(config(cpuset="1," * 40 + "x"),
                     f"opaque config: cpuConfig.cpuset: invalid item 'x' in '{'1,' * 32}...' "
                     f"({words.CPU_LIST})", id="a-long-value-is-cut"),
        pytest.param(config(strategy="spread", fullPCPUsOnly=True),
                     "opaque config: cpuConfig.strategy: spread cannot be combined with "
                     "cpuConfig.fullPCPUsOnly: true", id="spread-with-whole-cores"),
        pytest.param([], "opaque config: parameters must be a JSON object", id="not-an-object"),
    ],
)  # fmt: skip
def test_the_words_of_a_refusal(parameters: object, message: str) -> None:
    assert parameters_refusal(raw(parameters)) == message


def test_a_claim_keeps_the_refusal_of_each_of_its_entries() -> None:
    # The prepare reads the words parsed once, when the claim arrived.
    bad = next(c for c in INVALID if c.id == "strategy-outside-its-values")
    entries = parse_configs(
        [
            OpaqueConfig(FROM_CLAIM, ("a",), "dra.cpu", raw(bad.parameters)),
            OpaqueConfig(FROM_CLAIM, ("b",), "dra.cpu", raw(config(strategy="spread"))),
            OpaqueConfig(FROM_CLAIM, (), "gpu.example.com", b"{not json"),
        ]
    ).entries
    assert [e.refusal for e in entries] == [parameters_refusal(raw(bad.parameters)), ""]


# ---- the definitions the CEL is generated from -------------------------------------------------


def test_the_field_specs_are_read_from_the_schema() -> None:
    assert [(s.key, s.kind, s.required) for s in PARAMETERS] == [
        ("apiVersion", "string", True),
        ("cpuConfig", "object", True),
    ]
    specs = {s.key: s for s in CPU_CONFIG}
    assert list(specs) == [
        "cpuset", "strategy", "fullPCPUsOnly", "distributeAcrossNUMA",
        "groupSize", "alignUncoreCache", "isolated", "memoryPlacement", "sharedPool",
    ]  # fmt: skip
    assert specs["strategy"].choices == ("packed", "spread")
    assert specs["isolated"].choices == ("prefer", "require", "avoid")
    assert specs["memoryPlacement"].choices == ("local", "none")
    assert specs["sharedPool"].choices == ("include", "exclude")
    assert (specs["groupSize"].kind, specs["groupSize"].minimum) == ("integer", 1)
    assert specs["fullPCPUsOnly"].kind == "boolean" and specs["cpuset"].kind == "string"
    # The shape checks name the schema's one object and its cpuset as the schema spells them.
    assert [s.key for s in PARAMETERS if s.kind == "object"] == [CPU_CONFIG_KEY]
    assert CPUSET_KEY in specs


KNOWN = [s.key for s in PARAMETERS] + [s.key for s in CPU_CONFIG]


def one_edit_away(word: str) -> set[str]:
    letters = "aZ9_."
    out = {word[:i] + word[i + 1 :] for i in range(len(word))}
    out |= {word[:i] + c + word[i + 1 :] for i in range(len(word)) for c in letters}
    out |= {word[:i] + c + word[i:] for i in range(len(word) + 1) for c in letters}
    out |= {word[:i] + word[i + 1] + word[i] + word[i + 2 :] for i in range(len(word) - 1)}
    return out


@pytest.mark.parametrize("name", KNOWN)
def test_every_key_within_one_edit_is_taken_for_the_known_one(name: str) -> None:
    pattern = re.compile(words.edit_pattern(name))
    near = one_edit_away(name) | one_edit_away(name.upper()) | {name.lower(), name.swapcase()}
    for key in near:
        assert words.within_one_edit(key.lower(), name.lower()), key
        assert pattern.fullmatch(key), key
    for key in one_edit_away(name + "xy") | {"", name[1:-1], name + name}:
        if not words.within_one_edit(key.lower(), name.lower()):
            assert not pattern.fullmatch(key), key


@given(st.text(alphabet=string.ascii_letters + "\n", max_size=24), st.sampled_from(KNOWN))
def test_the_pattern_of_a_known_key_is_the_nearest_rule(key: str, name: str) -> None:
    # The admission policy finds the nearest key with these patterns; the driver by distance.
    taken = re.fullmatch(words.edit_pattern(name), key) is not None
    assert taken == words.within_one_edit(key.lower(), name.lower())


@given(st.text(alphabet="0123456789-, \t\nx\r", max_size=16))
def test_a_cpuset_is_refused_exactly_when_the_cpuset_parser_refuses_it(text: str) -> None:
    # The admission policy reads the cpuset with the same patterns, item by item.
    try:
        accepted = bool(CPUSet.parse(text))
    except CPUSetError:
        accepted = False
    assert (cpuset_refusal(text) == "") == accepted


@pytest.mark.parametrize(
    ("cpuset", "words_"),
    [
        pytest.param("", "cpuConfig.cpuset is empty", id="empty"),
        pytest.param("0,,2", "empty item in '0,,2'", id="empty-item"),
        pytest.param("0-3,a", "invalid item 'a' in '0-3,a'", id="letter"),
        pytest.param("0-3, 5-2", "reversed range ' 5-2' in '0-3, 5-2'", id="reversed"),
        pytest.param("70000", "'70000' in '70000' is beyond CPU 65535", id="beyond"),
        pytest.param("0000001", "'0000001' in '0000001' is beyond CPU 65535", id="seven-digits"),
    ],
)
def test_a_bad_cpuset_names_its_first_bad_item(cpuset: str, words_: str) -> None:
    assert words_ in cpuset_refusal(cpuset)


# ---- dracpu validate ----------------------------------------------------------------------------


def claim(name: str, parameters: object, kind: str = "ResourceClaim") -> dict[str, object]:
    devices = {
        "requests": [{"name": "cpus", "exactly": {"deviceClassName": "dra.cpu"}}],
        "config": [
            {"opaque": {"driver": "gpu.example.com", "parameters": {"any": "thing"}}},
            {"requests": ["cpus"], "opaque": {"driver": "dra.cpu", "parameters": parameters}},
        ],
    }
    spec: dict[str, object] = {"devices": devices}
    if kind == "ResourceClaimTemplate":
        spec = {"spec": spec}
    return {"apiVersion": "resource.k8s.io/v1", "kind": kind, "metadata": {"name": name},
            "spec": spec}  # fmt: skip


def validate(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dracpu.core.cli", "validate", *args],
        input=stdin, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_validate_gives_every_case_its_verdict_in_one_run(tmp_path: Path) -> None:
    documents = [claim(c.id, c.parameters, kind) for c in CASES
                 for kind in ("ResourceClaim", "ResourceClaimTemplate")]  # fmt: skip
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    done = validate("-f", str(path))
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.splitlines()
    expected = [
        f"{kind}/{c.id}: {prefix}devices.config[1].opaque.parameters: "
        f"{parameters_refusal(raw(c.parameters))}"
        for c in INVALID
        for kind, prefix in (("ResourceClaim", "spec."), ("ResourceClaimTemplate", "spec.spec."))
    ]
    assert lines == expected


def test_validate_reads_stdin_and_passes_valid_objects_silently() -> None:
    valid = [claim(c.id, c.parameters) for c in CASES if c.valid]
    done = validate("-f", "-", stdin=yaml.safe_dump_all(valid))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_validate_checks_classes_and_skips_other_kinds(tmp_path: Path) -> None:
    text = """
apiVersion: v1
kind: ConfigMap
metadata: {name: cpuConfig}
data: {apiVersion: v2}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: pinned}
spec:
  config:
  - opaque: {driver: dra.cpu, parameters: {apiVersion: v1alpha1, cpuConfig: {isolated: always}}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
spec: {devices: {config: {opaque: {}}}}
"""
    path = tmp_path / "mixed.yaml"
    path.write_text(text)
    done = validate("-f", str(path))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "DeviceClass/pinned: spec.config[0].opaque.parameters: opaque config: "
        "cpuConfig.isolated: 'always' is not one of prefer, require, avoid",
        "ResourceClaim/#3: spec.devices.config: must be a list",
    ]


def test_validate_reads_the_items_of_a_list() -> None:
    # What `kubectl get resourceclaims -A -o yaml` prints.
    bad = next(c for c in INVALID if c.id == "full-pcpus-a-string")
    listed = {"apiVersion": "v1", "kind": "List",
              "items": [claim("fine", config()), claim("stale", bad.parameters)]}  # fmt: skip
    done = validate("-f", "-", stdin=yaml.safe_dump(listed))
    assert done.returncode == 1
    assert done.stderr == (
        "ResourceClaim/stale: spec.devices.config[1].opaque.parameters: "
        f"{parameters_refusal(raw(bad.parameters))}\n"
    )


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        pytest.param(["-f", "/nonexistent/claims.yaml"], None,
                     "cannot read /nonexistent/claims.yaml: No such file or directory",
                     id="missing-file"),
        pytest.param(["-f", "-"], "kind: [ResourceClaim\n",
                     "standard input: not valid YAML at line 2", id="bad-yaml"),
    ],
)  # fmt: skip
def test_validate_refuses_unreadable_input_in_one_line(
    args: list[str], stdin: str | None, message: str
) -> None:
    done = validate(*args, stdin=stdin)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"dracpu validate: error: {message}\n"


def test_an_object_without_our_entries_has_no_refusal() -> None:
    other = claim("gpu", {"apiVersion": "v9"})
    other["spec"]["devices"]["config"][1]["opaque"]["driver"] = "gpu.example.com"  # type: ignore[index]
    assert object_refusals(other) == []
    assert object_refusals({"kind": "DeviceClass", "spec": {}}) == []
