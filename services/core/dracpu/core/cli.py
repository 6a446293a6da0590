"""The `dracpu` command and the conventions every dracpu command line follows:
bad input prints one line on stderr and exits 2; no traceback reaches a user."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from dracpu.core import __version__
from dracpu.core.errors import DracpuError, InsufficientCPUsError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint
    from types import ModuleType

EXIT_USAGE = 2


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one line: `<prog>: error: <message>`, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def run(main: Callable[[], int], prog: str) -> int:
    """Run a command body, mapping errors to one stderr line."""
    try:
        return main()
    except KeyboardInterrupt:
        return 130
    except InsufficientCPUsError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    except DracpuError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return 0


def run_async(main: Callable[[], Coroutine[Any, Any, int]], prog: str) -> int:
    import asyncio  # here: commands that only parse arguments or print help skip it

    return run(lambda: asyncio.run(main()), prog)


Check = Callable[[ArgumentParser, argparse.Namespace], None]


def service_main(
    argv: Sequence[str] | None,
    parser: ArgumentParser,
    service: str,
    runtime: str,
    check: Check | None = None,
) -> int:
    """The console script of a service: parse its arguments (and `check` them), set up
    logging, then import its `runtime` module and run `serve(args)` until it stops.

    Arguments are parsed before gRPC, FastAPI or the service are imported: `--help` and bad
    flags answer at once."""
    from dracpu.core.log import setup

    args = parser.parse_args(argv)
    if check is not None:
        check(parser, args)
    setup(args.verbosity, service, fmt=args.logging_format)
    serve = importlib.import_module(runtime).serve
    return run_async(lambda: serve(args), parser.prog)


# The subcommands: the entry points of this group in the installed distribution, name ->
# "module:main", which the build (setup.py) declares for the service folders it packages. Each
# module defines `main(argv) -> int` and, next to it, SUMMARY: its line in `dracpu --help`.
COMMAND_GROUP = "dracpu.commands"
DISTRIBUTION = "dra-driver-cpu"


def commands() -> dict[str, EntryPoint]:
    """The subcommands the installed distribution declares, by name."""
    from importlib import metadata  # here: `dracpu version` reads no metadata

    try:
        declared = metadata.distribution(DISTRIBUTION).entry_points.select(group=COMMAND_GROUP)
    except metadata.PackageNotFoundError:
        return {}
    return {ep.name: ep for ep in sorted(declared, key=lambda ep: ep.name)}


def _module(command: EntryPoint) -> ModuleType:
    """The command's module; ImportError where this installation lacks it or what it imports
    (the entry point of a service that is not installed)."""
    return importlib.import_module(command.module)


def available() -> dict[str, str]:
    """name -> summary of the subcommands whose modules import here."""
    listed: dict[str, str] = {}
    for name, command in commands().items():
        try:
            listed[name] = str(getattr(_module(command), "SUMMARY", ""))
        except ImportError:
            continue
    return listed


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print("usage: dracpu <command> [options]\n\ncommands:")
        for name, summary in available().items():
            print(f"  {name:<12} {summary}")
        print("  version      print the version")
        return 0 if args else EXIT_USAGE
    name, rest = args[0], args[1:]
    if name in ("version", "--version"):
        print(__version__)
        return 0
    command = commands().get(name)
    if command is None:
        print(f"dracpu: error: unknown command {name!r}", file=sys.stderr)
        return EXIT_USAGE
    try:
        module = _module(command)
    except ImportError as exc:
        print(f"dracpu: error: command {name!r} is not installed here ({exc})", file=sys.stderr)
        return EXIT_USAGE
    body: Callable[[list[str]], int] = getattr(module, command.attr)
    try:
        return body(rest)
    except ImportError as exc:  # a part the command imports late is missing from this image
        missing = exc.name or str(exc)
        print(
            f"dracpu: error: command {name!r} needs {missing}, not installed here", file=sys.stderr
        )
        return EXIT_USAGE


if __name__ == "__main__":
    raise SystemExit(main())
