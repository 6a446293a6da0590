"""JSON Schemas of the driver configuration, derived from its model (dracpu.core.config_model):
the api's answer (`/v1/node`'s `config`), and the chart's `driverConfig` value with the
deprecated `args.*` values folded into it, written into the chart's values.schema.json by
tools/gen-values-schema.py.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from dracpu.core.config_model import CHART_CONFIG, CHART_DEPRECATED, FIELDS, ConfigField

# What the chart's schema lets through as a Linux CPU list; the services parse it fully.
CPU_LIST_PATTERN = "^$|^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$"


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."


def _value_schema(field: ConfigField) -> dict[str, Any]:
    """The schema of the field's value, without description."""
    if field.choices:
        return {"type": "string", "enum": list(field.choices)}
    if field.kind is bool:
        return {"type": "boolean"}
    if field.kind is int:
        bounds = {"minimum": field.minimum, "maximum": field.maximum}
        return {"type": "integer"} | {k: v for k, v in bounds.items() if v is not None}
    if field.cpu_list:
        return {"type": "string", "pattern": CPU_LIST_PATTERN}
    return {"type": "string"}


def api_schema() -> dict[str, Any]:
    """The schema of the effective configuration as the api answers it: every field, spelled as
    the file spells it, apiVersion null when the file gave none."""
    properties: dict[str, Any] = {}
    for field in FIELDS:
        value = _value_schema(field)
        if field.nullable:
            value = {"anyOf": [value, {"type": "null"}]}
        properties[field.spelling] = value | {
            "default": field.default,
            "description": _sentence(field.help),
        }
    return {
        "title": "DriverConfigView",
        "description": "The effective driver configuration, spelled as the configuration file "
        "spells it.",
        "type": "object",
        "additionalProperties": False,
        "required": [field.spelling for field in FIELDS],
        "properties": properties,
    }


def chart_config_schema() -> dict[str, Any]:
    """The schema of the chart's `driverConfig`: the fields the chart lets through."""
    properties: dict[str, Any] = {}
    for field in FIELDS:
        if not field.chart:
            continue
        description = " ".join(filter(None, [_sentence(field.help), field.chart_note]))
        properties[field.spelling] = _value_schema(field) | {
            "default": field.document_default,
            "description": description,
        }
    owned = [field.spelling for field in FIELDS if not field.chart]
    refused = f" {', '.join(owned)}: owned by the chart and refused here." if owned else ""
    return {
        "type": "object",
        "additionalProperties": False,
        "description": "The driver's config file (docs/user/configuration.md)." + refused,
        "properties": properties,
    }


def chart_deprecated_schemas() -> dict[str, dict[str, Any]]:
    """The schemas of the deprecated `args.*` values, empty meaning the config file's value."""
    schemas: dict[str, dict[str, Any]] = {}
    for field in FIELDS:
        if not field.chart_deprecated:
            continue
        value = _value_schema(field)
        if field.choices:
            value["enum"] = ["", *field.choices]
        schemas[field.spelling] = value | {
            "description": f"DEPRECATED, use {field.values_key}: folded into the config file, "
            "and wins over it; empty leaves the file's value."
        }
    return schemas


def values_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The chart's values schema with its configuration parts those of the model: the whole
    `driverConfig`, and the deprecated keys of `args` (its other keys kept)."""
    result = copy.deepcopy(schema)
    properties = result["properties"]
    properties[CHART_CONFIG] = chart_config_schema()
    properties[CHART_DEPRECATED]["properties"].update(chart_deprecated_schemas())
    return result


def dump(schema: dict[str, Any]) -> str:
    """The file's text: two-space indents, a final newline."""
    return json.dumps(schema, indent=2) + "\n"
