"""The names that cross a boundary (claim namespaces, names, UIDs, request names, container
references), checked once where they enter, so nothing later can turn one into a path outside
its directory, a file name, or an error message too large for a gRPC trailer.

Rules as the API server's (k8s.io/apimachinery pkg/util/validation): a namespace is a DNS-1123
label, an object name a DNS-1123 subdomain, a request name a DNS label (with `/sub` for a
subrequest). Patterns are full matches over ASCII: `\\d` would let other scripts' digits in, and
`$` would accept a trailing newline.
"""

from __future__ import annotations

import re
from typing import Final

from dracpu.core.errors import InvalidInputError

MAX_LABEL: Final = 63
MAX_SUBDOMAIN: Final = 253
MAX_UID: Final = 128
# resource.k8s.io/v1 DeviceAttributeMaxValueLength: the longest string (or version) attribute.
MAX_ATTRIBUTE_VALUE: Final = 64
# What an error message echoes of an input.
ECHO: Final = 64

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# A UID names a file and a CDI device `claim-<uid>`: letters, digits, '-', '_', '.', ':', ending
# alnum (no '/', so never a path outside its directory).
_UID = re.compile(r"[A-Za-z0-9._:-]*[A-Za-z0-9]")
# Names the runtime reports (pod and container names): printable ASCII without '/'.
_RUNTIME_NAME = re.compile(r"[!-.0-~]+")


def echo(value: object, limit: int = ECHO) -> str:
    """`repr` of an input for an error message, cut to `limit` characters."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 3]}...({len(str(value))} characters)"


def _check(pattern: re.Pattern[str], value: str, limit: int, what: str, rule: str) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, not {type(value).__name__}")
    if len(value) > limit:
        raise InvalidInputError(f"{what} {echo(value)} is longer than {limit} characters")
    if pattern.fullmatch(value) is None:
        raise InvalidInputError(f"{what} {echo(value)} is not {rule}")
    return value


def check_label(value: str, what: str) -> str:
    return _check(
        _LABEL,
        value,
        MAX_LABEL,
        what,
        "a DNS label (lowercase letters, digits and '-', starting and ending with a letter "
        "or digit)",
    )


def check_namespace(value: str, what: str = "namespace") -> str:
    return check_label(value, what)


def check_object_name(value: str, what: str = "name") -> str:
    return _check(
        _SUBDOMAIN,
        value,
        MAX_SUBDOMAIN,
        what,
        "a DNS subdomain (lowercase letters, digits, '-' and '.')",
    )


def check_uid(value: str, what: str = "claim uid") -> str:
    return _check(
        _UID, value, MAX_UID, what, "a UID (letters, digits, '-', '_', '.', ':'; ending alnum)"
    )


def check_request_name(value: str, what: str = "request name") -> str:
    """`request` or `request/subrequest`, each a DNS label."""
    if isinstance(value, str) and value.count("/") == 1:
        main, sub = value.split("/")
        check_label(main, what)
        check_label(sub, what)
        return value
    return check_label(value, what)


def check_runtime_name(value: str, what: str) -> str:
    """A pod or container name as a runtime reports it; empty is allowed."""
    if value == "":
        return value
    return _check(_RUNTIME_NAME, value, MAX_SUBDOMAIN, what, "printable ASCII without '/'")


def check_bounded(value: str, what: str, limit: int = MAX_SUBDOMAIN) -> str:
    """Free text kept in state (device and pool names): bounded and without control
    characters."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, not {type(value).__name__}")
    if len(value) > limit:
        raise InvalidInputError(f"{what} {echo(value)} is longer than {limit} characters")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise InvalidInputError(f"{what} {echo(value)} has control characters")
    return value
