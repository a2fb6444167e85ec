"""`witty-profiler`: argparse front end. Subcommands live in witty_profiler.commands.

Exit codes: 0 success (also when some collectors were unavailable), 2 bad usage or bad input
(one line on stderr, no traceback), 1 internal error (set WITTY_DEBUG=1 for the traceback), 130
interrupted; `cluster collect` adds 3 and 4 (witty_profiler.commands.cluster.EXIT_CODES).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable

from witty_profiler.topology.version import VERSION as __version__
from witty_profiler.commands import COMMANDS, HELP, module_of
from witty_profiler.topology.errors import InputError


class OneLineErrorParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(command: str | None = None, *, every: bool = True) -> argparse.ArgumentParser:
    """The parser of every command (`every`), or of `command` alone: the others then stand as their name and
    one-line help from commands.HELP, enough for --help and for argparse's list of choices, without importing
    their modules (a start imports only what the command it runs needs)."""
    stubs = {module_of(name): name for name in HELP if not every and name != command}
    parser = OneLineErrorParser(prog="witty-profiler", description="Find why an AI training or inference host is slow.",
                                epilog="Without a command: `witty-profiler [--config FILE]` runs the service (serve), "
                                       "`witty-profiler --offline --duration N` collects one window (collect).")
    parser.add_argument("--version", action="version", version=f"witty-profiler {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineErrorParser)
    for name in COMMANDS:
        if name in stubs:
            sub.add_parser(stubs[name], help=HELP[stubs[name]])
        else:
            importlib.import_module(f"witty_profiler.commands.{name}").register(sub)
    return parser


def seed_form(argv: list[str]) -> list[str]:
    """The forms of the original quick start, as subcommands: bare `witty-profiler` (or options only, such as
    `--config FILE`) is `serve`; `--offline --duration N` is one window, `collect`."""
    if argv and not argv[0].startswith("-"):
        return argv
    if any(a in ("-h", "--help", "--version") for a in argv[:1]):
        return argv
    return ["collect", *argv] if "--offline" in argv else ["serve", *argv]


def main(argv: list[str] | None = None) -> int:
    argv = seed_form(sys.argv[1:] if argv is None else list(argv))
    parser = build_parser(argv[0] if argv and not argv[0].startswith("-") else None, every=False)
    args = parser.parse_args(argv)
    return guarded(lambda: args.handler(args))


def guarded(call: Callable[[], int | None]) -> int:
    """Run a command and map what escapes it to the exit codes above, one line on stderr."""
    try:
        return int(call() or 0)
    except InputError as exc:
        print(f"witty-profiler: error: {_visible(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("witty-profiler: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, not a traceback
        if os.environ.get("WITTY_DEBUG"):
            import traceback
            traceback.print_exc()
        print(f"witty-profiler: internal error: {type(exc).__name__}: {_visible(exc)} (set WITTY_DEBUG=1 for "
              "details)", file=sys.stderr)
        return 1


def _visible(exc: BaseException) -> str:
    """An error message as it may reach a terminal: what it quotes (a file name, a value) cannot act on it."""
    from witty_profiler.topology.text import visible
    return visible(str(exc))


def entry() -> None:
    """The `witty-profiler` command: main(), then an exit that leaves the freeing of memory to the system.
    A graph of 100,000 entities takes Python 0.3 s to tear down object by object; nothing is left to do
    by then (the output is flushed here, and every command closes what it opened before returning)."""
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can reach it
            pass
    os._exit(code)


if __name__ == "__main__":
    entry()
