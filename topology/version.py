"""The version of witty-profiler: stamped into every graph it writes (meta.tool_version) and reported by
its commands and servers. pyproject.toml says the same (tests/test_packaging.py checks)."""

VERSION = "0.1.0"
