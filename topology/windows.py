"""Windows as the service names them on the wire, for the service and for the clients that pull from it
(`cluster collect --services`): a window's id and the environment variable of the bearer token."""

from __future__ import annotations

import re

WINDOW_ID = re.compile(r"w-[0-9]{8}T[0-9]{6}Z(?:-[0-9]{1,9})?")  # whole ids only: WINDOW_ID.fullmatch
SERVICE_TOKEN_ENV = "WITTY_SERVICE_TOKEN"


def is_window_id(text: object) -> bool:
    """A window id as the ring makes them: the only names from which the service builds a file name."""
    return isinstance(text, str) and WINDOW_ID.fullmatch(text) is not None
