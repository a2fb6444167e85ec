"""Errors that mean "the input is bad", as opposed to a bug in the tool.

The CLI turns these into one line on stderr and exit code 2; the MCP server into an `isError`
result. Their message is written for the person who gave the input: what is wrong and, where it
helps, what to do instead.
"""


class InputError(ValueError):
    """Bad input given by the user (a file, an option, a threshold)."""


class GraphFormatError(InputError):
    """A graph file that cannot be read: not JSON, wrong shape, unknown schema version..."""
