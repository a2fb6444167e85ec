"""`witty-mcp`: the MCP server, a thin adapter over the `witty_profiler` API.

Tools to collect, load, summarise, query, convert a layer, match patterns, write a report and
compare two graphs; resources for graphs and the pattern catalog; a prompt that walks an
assistant through the four diagnosis steps. All MCP wiring lives here; everything it exposes
exists in the library and the CLI first.
"""
