"""The chart's admission policy for `dra.cpu` opaque configurations, generated in CEL from the
schema (`dracpu.allocator.domain.opaque_schema`) and the words of the refusals
(`dracpu.allocator.domain.opaque_words`).

`tools/gen-opaque-policy.py` writes `policy_template()` into the chart; a test holds the
committed template to it. The policy is a ValidatingAdmissionPolicy: no webhook server, the API
server itself refuses a ResourceClaim, ResourceClaimTemplate or DeviceClass whose `dra.cpu`
parameters every node would refuse. The parameters are a RawExtension; CEL sees the objects of
a policy as dynamic values, so they are read like any map.

Its validations are the shape checks of `dracpu.allocator.domain.opaque` and the node-free
rules of `dracpu.allocator.claims.admission`, in their order. The API server answers with the
first validation that fails; each validation names the first entry that breaks it, in the
words the prepare would use, behind the entry's field
(`spec.devices.config[0].opaque.parameters: opaque config: ...`). The nearest known key of an
unknown one is found by one pattern per known key, matching every key within one edit of it,
letter case aside (`opaque_words.edit_pattern`). An UPDATE is checked only when it changes the
configurations: an object stored before the policy was installed stays deletable.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from dracpu.allocator.domain import opaque_words as words
from dracpu.allocator.domain.opaque import (
    API_VERSION_KEY,
    BLANK_PATTERN,
    CONFIG_PATHS,
    CPU_CONFIG_KEY,
    CPUSET_KEY,
    ITEM_PATTERN,
    MAX_DIGITS,
    NUMBER_PATTERN,
    wrong_value,
)
from dracpu.allocator.domain.opaque_schema import CPU_CONFIG, PARAMETERS, POLICY_FIELDS, FieldSpec
from dracpu.core.cpuset import MAX_CPUS
from dracpu.core.driver import DRIVER_NAME

# Where a message template takes a CEL expression.
HOLE = "\x00"
# Words CEL does not take as a field name after a dot.
CEL_RESERVED = frozenset({
    "as", "break", "const", "continue", "else", "false", "for", "function", "if", "import", "in",
    "let", "loop", "namespace", "null", "package", "return", "true", "var", "void", "while",
})  # fmt: skip


def literal(text: str) -> str:
    """A CEL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


def fill(template: str, *parts: str) -> str:
    """The CEL expression of a message whose holes take the CEL expressions `parts`."""
    pieces = template.split(HOLE)
    assert len(pieces) == len(parts) + 1, template
    terms: list[str] = []
    for piece, part in zip(pieces, [*parts, ""], strict=True):
        if piece:
            terms.append(literal(piece))
        if part:
            terms.append(f"({part})")
    return " + ".join(terms)


def cut(text: str) -> str:
    limit = words.MAX_SHOWN
    return f"size({text}) > {limit} ? {text}.substring(0, {limit}) + '...' : {text}"


def shown(value: str) -> str:
    """`opaque_words.shown` of the value of the CEL expression `value`, in CEL."""
    return f"[{value}].map(v, {_shown('v')})[0]"


def _shown(value: str) -> str:
    return (
        f"type({value}) == string ? {fill(words.shown(HOLE), cut(value))} : "
        f"type({value}) == bool || type({value}) == int ? string({value}) : "
        f"type({value}) == double ? {literal(words.shown(0.5))} : "
        f"type({value}) == list ? {literal(words.shown([]))} : "
        f"type({value}) == map ? {literal(words.shown({}))} : {literal(words.shown(None))}"
    )


def fits(spec: FieldSpec, value: str) -> str:
    """`opaque.fits` in CEL."""
    if spec.kind == "boolean":
        return f"type({value}) == bool"
    if spec.kind == "integer":
        least = "" if spec.minimum is None else f" && {value} >= {spec.minimum}"
        return f"type({value}) == int{least}"
    if spec.kind == "string":
        return f"type({value}) == string"
    if spec.kind == "enum":
        return f"{value} in [{', '.join(literal(choice) for choice in spec.choices)}]"
    return f"type({value}) == map"


def member(obj: str, key: str) -> str:
    """`obj.key` in CEL; the schema's keys are CEL identifiers."""
    assert re.fullmatch("[A-Za-z_][A-Za-z0-9_]*", key) and key not in CEL_RESERVED, key
    return f"{obj}.{key}"


def keys(specs: Sequence[FieldSpec]) -> str:
    return f"[{', '.join(literal(spec.key) for spec in specs)}]"


def unknown_message(key: str, specs: Sequence[FieldSpec], within: str) -> str:
    """`opaque.unknown_key`'s refusal of the unknown `key` in CEL."""
    known = [spec.key for spec in specs]
    prefix = f"{within}." if within else ""
    hint = literal(words.known_fields(within, known))
    for name in reversed(known):
        pattern = literal(f"^{words.edit_pattern(name)}$")
        hint = (
            f"{key}.matches({pattern}) ? {literal(words.did_you_mean(prefix + name))} :\n  {hint}"
        )
    # A longer key is more than one edit from every known one: no pattern need read it.
    longest = max(len(name) for name in known) + 1
    hint = f"size({key}) > {longest} ? {literal(words.known_fields(within, known))} :\n  {hint}"
    field = f"{literal(prefix)} + ({cut(key)})" if prefix else cut(key)
    return fill(words.unknown_field(HOLE, HOLE), field, hint)


def first_unknown(mapping: str, specs: Sequence[FieldSpec]) -> str:
    """The unknown keys of `mapping` that come first in code point order (one, or none)."""
    known = keys(specs)
    return f"{mapping}.filter(k, !(k in {known}) && {mapping}.all(j, j in {known} || k <= j))"


@dataclass(frozen=True, slots=True)
class Check:
    """One validation: over which entries, what each must satisfy, and the refusal of one
    that does not (CEL, over the entry `e`)."""

    over: str  # `entries` (e.p: the parameters) or `cpuConfigs` (e.c: their cpuConfig)
    holds: str
    refusal: str
    fallback: str  # the message when the refusal cannot be computed

    def validation(self) -> dict[str, str]:
        entries = f"variables.{self.over}"
        return {
            "expression": f"{entries}.all(e,\n  {self.holds})",
            "messageExpression": (
                f"({entries}.map(e, !({self.holds}),\n  e.at + ': ' + ({self.refusal})) + [''])[0]"
            ),
            "message": self.fallback,
        }


def parameter_checks() -> list[Check]:
    """The checks of the parameters object, up to its cpuConfig."""
    is_map = "type(e.p) == map"
    version = member("e.p", API_VERSION_KEY)
    config = member("e.p", CPU_CONFIG_KEY)
    top = [spec.key for spec in PARAMETERS]
    return [
        Check("entries", is_map, literal(words.parameters_not_an_object()),
              words.parameters_not_an_object()),
        Check(
            "entries",
            f"!({is_map}) || has({version}) && {version} == {literal(words.API_VERSION)}",
            f"!has({version}) ? {literal(words.missing_api_version())} :\n  "
            + fill(words.unsupported_api_version(HOLE), shown(version)),
            words.unsupported_api_version("other than " + words.API_VERSION),
        ),
        Check(
            "entries",
            f"!({is_map}) || e.p.all(k, k in {keys(PARAMETERS)})",
            f"{first_unknown('e.p', PARAMETERS)}.map(k,\n  "
            f"{unknown_message('k', PARAMETERS, '')})[0]",
            words.unknown_field("<key>", words.known_fields("", top)),
        ),
        Check(
            "entries",
            f"!({is_map}) || has({config}) && type({config}) == map",
            f"!has({config}) ? {literal(words.missing_field(CPU_CONFIG_KEY))} :\n  "
            + fill(words.not_an_object(CPU_CONFIG_KEY, HOLE), shown(config)),
            words.not_an_object(CPU_CONFIG_KEY, "<value>"),
        ),
    ]  # fmt: skip


def config_checks() -> list[Check]:
    """The checks of cpuConfig: its keys, each field's value, the cpuset's syntax, and the
    rules no node changes."""
    known = [spec.key for spec in CPU_CONFIG]
    checks = [
        Check(
            "cpuConfigs",
            f"e.c.all(k, k in {keys(CPU_CONFIG)})",
            f"{first_unknown('e.c', CPU_CONFIG)}.map(k,\n  "
            f"{unknown_message('k', CPU_CONFIG, CPU_CONFIG_KEY)})[0]",
            words.unknown_field(
                f"{CPU_CONFIG_KEY}.<key>", words.known_fields(CPU_CONFIG_KEY, known)
            ),
        )
    ]
    for spec in CPU_CONFIG:
        value = member("e.c", spec.key)
        field = f"{CPU_CONFIG_KEY}.{spec.key}"
        checks.append(
            Check(
                "cpuConfigs",
                f"!has({value}) || {value} == null || {fits(spec, value)}",
                fill(wrong_value(spec, field, HOLE), shown(value)),
                wrong_value(spec, field, "<value>"),
            )
        )
    return [*checks, *rule_checks()]


def _anchored(pattern: str) -> str:
    return literal(f"^{pattern}$")


def item_fits(item: str) -> str:
    """Whether one item of a cpuset is a number or a range CPUSet.parse takes, in CEL."""
    numbers = f"{item}.findAll({literal(NUMBER_PATTERN)})"
    return (
        f"{item}.matches({_anchored(ITEM_PATTERN)}) && [{numbers}].all(n,\n  "
        f"n.all(d, size(d) <= {MAX_DIGITS}) && int(n[0]) <= int(n[size(n) - 1]) && "
        f"int(n[size(n) - 1]) < {MAX_CPUS})"
    )


def item_refusal(item: str, whole: str) -> str:
    """`opaque.cpuset_refusal`'s words for one item of a cpuset, "" for a good one."""
    numbers = f"{item}.findAll({literal(NUMBER_PATTERN)})"
    last = MAX_CPUS - 1
    beyond = fill(words.beyond_last_cpu(HOLE, HOLE, last), shown(item), shown(whole))
    return (
        f"{item}.matches({_anchored(BLANK_PATTERN)}) ? "
        f"{fill(words.empty_item(HOLE), shown(whole))} :\n  "
        f"!{item}.matches({_anchored(ITEM_PATTERN)}) ? "
        f"{fill(words.invalid_item(HOLE, HOLE), shown(item), shown(whole))} :\n  "
        f"[{numbers}].map(n, n.exists(d, size(d) > {MAX_DIGITS}) ? {beyond} :\n  "
        f"int(n[0]) > int(n[size(n) - 1]) ? "
        f"{fill(words.reversed_range(HOLE, HOLE), shown(item), shown(whole))} :\n  "
        f"int(n[size(n) - 1]) > {last} ? {beyond} : '')[0]"
    )


def rule_checks() -> list[Check]:
    cpuset = f"e.c.{CPUSET_KEY}"
    policy = f"[{', '.join(literal(alias) for _, alias in POLICY_FIELDS)}]"
    group, distribute = "e.c.groupSize", "e.c.distributeAcrossNUMA"
    strategy, full = "e.c.strategy", "e.c.fullPCPUsOnly"
    blank = f"{cpuset}.matches({_anchored(BLANK_PATTERN)})"
    return [
        Check(
            "cpuConfigs",
            f"!has({cpuset}) || type({cpuset}) != string ||\n  "
            f"!{blank} && {cpuset}.split(',').all(r, {item_fits('r')})",
            f"{blank} ? {literal(words.empty_cpuset())} :\n  "
            f"{cpuset}.split(',').filter(r, !({item_fits('r')})).map(r,\n  "
            f"{item_refusal('r', cpuset)})[0]",
            words.invalid_item("<item>", "<value>"),
        ),
        Check(
            "cpuConfigs",
            f"!has({cpuset}) || {cpuset} == null || {policy}.all(f, !(f in e.c) || e.c[f] == null)",
            f"{policy}.filter(f, f in e.c && e.c[f] != null).map(f,\n  "
            f"{fill(words.not_with_external(HOLE), 'f')})[0]",
            words.not_with_external("<field>"),
        ),
        Check(
            "cpuConfigs",
            f"!has({group}) || {group} == null || has({distribute}) && {distribute} == true",
            literal(words.group_size_without_distribute()),
            words.group_size_without_distribute(),
        ),
        Check(
            "cpuConfigs",
            f"!(has({strategy}) && {strategy} == 'spread' && has({full}) && {full} == true)",
            literal(words.spread_with_full_pcpus()),
            words.spread_with_full_pcpus(),
        ),
    ]


def _configs(obj: str) -> str:
    """The device configurations of `obj` (object or oldObject), by the request's resource."""
    branches = []
    for resource, path in CONFIG_PATHS.values():
        steps = [".".join((obj, *path[: depth + 1])) for depth in range(len(path))]
        present = " && ".join(f"has({step})" for step in steps)
        branches.append((resource, f"({present} ? {steps[-1]} : [])"))
    return _by_resource(branches)


def _by_resource(branches: list[tuple[str, str]]) -> str:
    *first, (_, last) = branches
    chain = [f"request.resource.resource == {literal(res)} ? {expr} :" for res, expr in first]
    return "\n".join([*chain, last])


def variables() -> list[dict[str, str]]:
    config = member("e.p", CPU_CONFIG_KEY)
    paths = [(resource, literal(".".join(path))) for resource, path in CONFIG_PATHS.values()]
    entry = (
        # dyn: the values of a map literal must be of one type.
        "{'at': dyn(variables.path + '[' + string(i) + '].opaque.parameters'), "
        "'p': c.opaque.parameters}"
    )
    return [
        {"name": "configs", "expression": _configs("object")},
        {
            "name": "previous",
            "expression": f"request.operation == 'UPDATE' ? (\n{_configs('oldObject')}) : []",
        },
        {"name": "path", "expression": _by_resource(paths)},
        {
            "name": "entries",
            "expression": (
                "variables.configs == variables.previous ? [] :\n"
                "variables.configs.transformList(i, c,\n"
                f"  has(c.opaque) && c.opaque.driver == {literal(DRIVER_NAME)},\n  {entry})"
            ),
        },
        {
            "name": "cpuConfigs",
            "expression": (
                f"variables.entries.filter(e, type(e.p) == map && has({config}) &&\n"
                f"  type({config}) == map).map(e, {{'at': e.at, 'c': {config}}})"
            ),
        },
    ]


def policy_spec() -> dict[str, object]:
    resources = [resource for resource, _ in CONFIG_PATHS.values()]
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": ["resource.k8s.io"],
                    "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": resources,
                }
            ]
        },
        "variables": variables(),
        "validations": [c.validation() for c in [*parameter_checks(), *config_checks()]],
    }


# ---- the chart template ----------------------------------------------------------------------

TEMPLATE = "templates/opaqueconfigpolicy.yaml"
_HEAD = """\
{{/*
Generated by tools/gen-opaque-policy.py from the allocator's opaque configuration schema
(dracpu.allocator.domain.opaque_schema and opaque_cel): change those and run it again.
*/}}
{{- if .Values.admission.validateClaims }}
# The dra.cpu opaque parameters of ResourceClaims, ResourceClaimTemplates and DeviceClasses are
# refused at admission when every node's prepare would refuse them, in the prepare's words.
# Rendered without asking the cluster (plain `helm template` too): every Kubernetes that serves
# resource.k8s.io/v1 (1.34 and later) serves admissionregistration.k8s.io/v1 policies (1.30).
"""
_META = """\
metadata:
  name: {{ include "dracpu.fullname" . }}-opaque-config
  labels:
    {{- include "dracpu.labels" . | nindent 4 }}
"""
_BINDING = """\
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
%sspec:
  policyName: {{ include "dracpu.fullname" . }}-opaque-config
  validationActions: ["Deny"]
{{- end }}
"""


def policy_template() -> str:
    """The chart's template of the policy and its binding."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
        style = "|" if "\n" in data else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

    Dumper.add_representer(str, text)
    # One line per line of CEL, however long: a folded line would read as another expression.
    spec = yaml.dump({"spec": policy_spec()}, Dumper=Dumper, sort_keys=False, width=1 << 16)
    policy = "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\n"
    return _HEAD + policy + _META + spec + _BINDING % _META
