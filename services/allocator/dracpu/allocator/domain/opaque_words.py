"""The words that refuse an opaque configuration, shared by the driver's prepare, `dracpu
validate` and the chart's admission policy.

Every refusal is built by one function here. The Python checks call it with the value shown;
the admission policy's generator (`dracpu.allocator.domain.opaque_cel`) calls it with holes
that it fills with CEL, so a refusal at `kubectl apply` and at prepare say the same words.
A value is shown as its text when it is a string, a boolean or an integer, and by its JSON
kind otherwise: the two sides spell those alike.
"""

from __future__ import annotations

from collections.abc import Sequence

API_VERSION = "v1alpha1"
PREFIX = "opaque config: "
# Longer strings are cut in a message (the API server's answer stays one short line).
MAX_SHOWN = 64
# What a cpuset must look like, for the refusal of one that does not.
CPU_LIST = "a CPU list is like 0-3,8-11"


def cut(text: str) -> str:
    """A string of the parameters (a value, a key), cut to MAX_SHOWN characters."""
    return text if len(text) <= MAX_SHOWN else f"{text[:MAX_SHOWN]}..."


def shown(value: object) -> str:
    """A value of the parameters as a message spells it."""
    if isinstance(value, str):
        return f"'{cut(value)}'"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "a decimal number"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "null"


def parameters_not_an_object() -> str:
    return f"{PREFIX}parameters must be a JSON object"


def missing_api_version() -> str:
    return f"{PREFIX}missing field 'apiVersion' (supported: {API_VERSION})"


def unsupported_api_version(value: str) -> str:
    return f"{PREFIX}unsupported apiVersion {value} (supported: {API_VERSION})"


def missing_field(field: str) -> str:
    return f"{PREFIX}missing field '{field}'"


def unknown_field(field: str, hint: str) -> str:
    return f"{PREFIX}unknown field '{field}' {hint}"


def did_you_mean(field: str) -> str:
    return f"(did you mean '{field}'?)"


def known_fields(within: str, keys: Sequence[str]) -> str:
    where = f" of {within}" if within else ""
    return f"(known fields{where}: {', '.join(keys)})"


def not_a_boolean(field: str, value: str) -> str:
    return f"{PREFIX}{field}: {value} is not a boolean (true or false)"


def not_an_integer(field: str, value: str, minimum: int | None) -> str:
    least = "" if minimum is None else f" >= {minimum}"
    return f"{PREFIX}{field}: {value} is not an integer{least}"


def not_a_string(field: str, value: str) -> str:
    return f"{PREFIX}{field}: {value} is not a string"


def not_an_object(field: str, value: str) -> str:
    return f"{PREFIX}{field}: {value} is not an object"


def not_one_of(field: str, value: str, choices: Sequence[str]) -> str:
    return f"{PREFIX}{field}: {value} is not one of {', '.join(choices)}"


def empty_cpuset() -> str:
    return f"{PREFIX}cpuConfig.cpuset is empty"


def empty_item(cpuset: str) -> str:
    return f"{PREFIX}cpuConfig.cpuset: empty item in {cpuset} ({CPU_LIST})"


def invalid_item(item: str, cpuset: str) -> str:
    return f"{PREFIX}cpuConfig.cpuset: invalid item {item} in {cpuset} ({CPU_LIST})"


def reversed_range(item: str, cpuset: str) -> str:
    return f"{PREFIX}cpuConfig.cpuset: reversed range {item} in {cpuset} ({CPU_LIST})"


def beyond_last_cpu(item: str, cpuset: str, last: int) -> str:
    return f"{PREFIX}cpuConfig.cpuset: {item} in {cpuset} is beyond CPU {last} ({CPU_LIST})"


def not_with_external(field: str) -> str:
    return (
        f"{PREFIX}cpuConfig.{field} is not valid with allocator external (the cpuset is explicit)"
    )


def group_size_without_distribute() -> str:
    return f"{PREFIX}cpuConfig.groupSize needs cpuConfig.distributeAcrossNUMA: true"


def spread_with_full_pcpus() -> str:
    # The kubelet refuses this pair of its options too: spreading threads over cores is the
    # opposite of handing out whole cores.
    return (
        f"{PREFIX}cpuConfig.strategy: spread cannot be combined with cpuConfig.fullPCPUsOnly: true"
    )


# ---- the nearest known key -------------------------------------------------------------------


def within_one_edit(a: str, b: str) -> bool:
    """Whether one insertion, deletion, substitution or swap of neighbours turns `a` into `b`
    (or they are equal)."""
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) > len(b):
        a, b = b, a
    start = 0
    while start < len(a) and a[start] == b[start]:
        start += 1
    if len(a) < len(b):  # one insertion
        return a[start:] == b[start + 1 :]
    if start >= len(a) - 1:
        return True
    if a[start + 1 :] == b[start + 1 :]:  # one substitution
        return True
    return (
        a[start] == b[start + 1] and a[start + 1] == b[start] and a[start + 2 :] == b[start + 2 :]
    )


def nearest(key: str, known: Sequence[str]) -> str | None:
    """The first known key (in the schema's order) within one edit of `key`, letter case
    aside; None when there is none."""
    folded = key.lower()
    return next((name for name in known if within_one_edit(folded, name.lower())), None)


def edit_pattern(name: str) -> str:
    """An RE2 (and Python) pattern that a whole string matches exactly when `nearest` takes
    it for `name`: within one edit of it, letter case aside. The admission policy holds one
    per known key, anchored."""
    word = name.lower()
    alternatives: list[str] = []
    for i in range(len(word) + 1):
        alternatives.append(f"{word[:i]}.{word[i:]}")  # an insertion
    for i in range(len(word)):
        alternatives.append(f"{word[:i]}.?{word[i + 1 :]}")  # a substitution or a deletion
    for i in range(len(word) - 1):
        alternatives.append(f"{word[:i]}{word[i + 1]}{word[i]}{word[i + 2 :]}")  # a swap
    unique = list(dict.fromkeys(alternatives))
    # s: `.` is any character, a newline too, as an edit may be.
    return f"(?is:{'|'.join(unique)})"
