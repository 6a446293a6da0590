"""The `dracpu` command and the conventions every dracpu command line follows:
bad input prints one line on stderr and exits 2; no traceback reaches a user."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NoReturn

from dracpu.core import __version__
from dracpu.core.errors import DracpuError, InsufficientCPUsError

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


# subcommand -> (module with `main(argv) -> int`, summary)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "gatherinfo": ("dracpu.topology.gatherinfo", "write a report of the node's CPU topology"),
    "simulate": ("dracpu.allocator.simulate", "preview a CPU placement on a gatherinfo report"),
    "introspect": ("dracpu.core.introspect", "describe the driver's metrics"),
    "dev": ("dracpu.dev.cli", "run all services locally (dev up, dev claim, dev release)"),
    "health": ("dracpu.core.healthcheck", "check one service's health (container probes)"),
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print("usage: dracpu <command> [options]\n\ncommands:")
        for name, (_, summary) in SUBCOMMANDS.items():
            print(f"  {name:<12} {summary}")
        print("  version      print the version")
        return 0 if args else EXIT_USAGE
    command, rest = args[0], args[1:]
    if command in ("version", "--version"):
        print(__version__)
        return 0
    if command not in SUBCOMMANDS:
        print(f"dracpu: error: unknown command {command!r}", file=sys.stderr)
        return EXIT_USAGE
    module = importlib.import_module(SUBCOMMANDS[command][0])
    result: int = module.main(rest)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
