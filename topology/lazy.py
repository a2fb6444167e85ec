"""Public names of a package imported on first use (PEP 562), so that importing one small module of
a package (an error class, a constant) does not import everything its package offers."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package`, whose public name N is `exports[N]` ('module:attribute',
    the module relative to the package)."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attr = exports[name].partition(":")
        value = getattr(importlib.import_module(f"{package}.{module}"), attr or name)
        setattr(sys.modules[package], name, value)  # once found, a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__


class LazyPattern:
    """A module-level regular expression compiled where it is first used, not when its module is imported
    (some take 0.4 ms to compile, paid by every start of the CLI that imports them and may never match).
    The first use puts the compiled pattern in the module's globals in its place: later uses are plain.

        _SURROGATE = LazyPattern(globals(), "_SURROGATE", "[\\ud800-\\udfff]")
    """

    __slots__ = ("_namespace", "_name", "_pattern", "_flags")

    def __init__(self, namespace: dict[str, Any], name: str, pattern: str, flags: int = 0) -> None:
        self._namespace, self._name, self._pattern, self._flags = namespace, name, pattern, flags

    def __getattr__(self, attr: str) -> Any:
        import re
        compiled = re.compile(self._pattern, self._flags)
        if self._namespace.get(self._name) is self:
            self._namespace[self._name] = compiled
        return getattr(compiled, attr)
