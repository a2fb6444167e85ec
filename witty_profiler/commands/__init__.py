"""One module per `witty-profiler` subcommand, each with `register(subparsers)`.

The CLI discovers the modules of this package, so adding a command is adding a file. A handler
takes the parsed arguments and returns an exit code; it raises `topology.errors.InputError` for
bad input, which the CLI turns into one line on stderr and exit 2.
"""

import os

# the modules of this folder (a listing is cheaper than pkgutil, which the CLI's start-up would pay for)
COMMANDS = sorted(name[:-3] for name in os.listdir(__path__[0]) if name.endswith(".py") and not name.startswith("_"))
