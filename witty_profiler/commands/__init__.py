"""One module per `witty-profiler` subcommand, each with `register(subparsers)`.

The CLI discovers the modules of this package, so adding a command is adding a file. A handler
takes the parsed arguments and returns an exit code; it raises `topology.errors.InputError` for
bad input, which the CLI turns into one line on stderr and exit 2.
"""

import pkgutil

COMMANDS = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
