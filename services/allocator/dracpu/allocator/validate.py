"""`dracpu validate -f FILE`: the chart's admission check of `dra.cpu` opaque configurations,
offline, on the ResourceClaims, ResourceClaimTemplates and DeviceClasses of YAML files.

It runs the allocator's own parser and rules (`dracpu.allocator.claims.admission`), so it
refuses what the admission policy and every node's prepare refuse, in their words. Exit 0 when
every object passes; 1 with one line per refused entry, `<Kind>/<name>: <field>: <message>`;
2 with one line when a file cannot be read or is not YAML. Objects of other kinds are skipped;
the items of a List (`kubectl get -o yaml`) are read as documents.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from dracpu.core.cli import ArgumentParser, run
from dracpu.core.documents import load_yaml_documents
from dracpu.core.errors import InvalidInputError

PROG = "dracpu validate"
SUMMARY = "check the dra.cpu opaque configs of claims, templates and classes"


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog=PROG,
        description="Check the dra.cpu opaque configurations of ResourceClaims, "
        "ResourceClaimTemplates and DeviceClasses as the chart's admission policy does.",
    )
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        metavar="FILE",
        help="a YAML file of one or more documents, `-` for standard input (repeatable)",
    )
    return parser


def read(name: str) -> str:
    if name == "-":
        try:
            return sys.stdin.read()
        except UnicodeDecodeError:
            raise InvalidInputError("standard input is not UTF-8 text") from None
    try:
        return Path(name).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError(f"cannot read {name}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InvalidInputError(f"{name} is not UTF-8 text") from None


def documents(name: str, text: str) -> list[object]:
    return load_yaml_documents(text, "standard input" if name == "-" else name)


def title(document: Mapping[str, object], number: int) -> str:
    """`<Kind>/<name>`, the name being the document's number when it has none."""
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return f"{document.get('kind')}/{name if isinstance(name, str) and name else f'#{number}'}"


def objects(loaded: Sequence[object]) -> Iterator[tuple[int, Mapping[str, object]]]:
    """The documents, numbered from 1, and the items of a List (`kubectl get -o yaml`)."""
    for number, document in enumerate(loaded, 1):
        if not isinstance(document, Mapping):
            continue
        items = document.get("items")
        if str(document.get("kind", "")).endswith("List") and isinstance(items, list):
            yield from ((number, item) for item in items if isinstance(item, Mapping))
        else:
            yield number, document


def refusals(loaded: Sequence[object]) -> Iterator[str]:
    from dracpu.allocator.claims.admission import object_refusals
    from dracpu.allocator.domain.opaque import CONFIG_PATHS

    for number, document in objects(loaded):
        if document.get("kind") not in CONFIG_PATHS:
            continue
        for refusal in object_refusals(document):
            yield f"{title(document, number)}: {refusal.field}: {refusal.message}"


def validate(names: Sequence[str]) -> int:
    loaded = [d for name in names for d in documents(name, read(name))]
    refused = list(refusals(loaded))
    for line in refused:
        print(line, file=sys.stderr)
    return 1 if refused else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run(lambda: validate(args.filename), PROG)


if __name__ == "__main__":
    raise SystemExit(main())
