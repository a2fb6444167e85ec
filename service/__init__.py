"""The service: continuous monitoring of this host in rolling windows, kept in a capped ring on disk,
served over a REST API and the MCP server on one port (`witty-profiler serve`, or plain `witty-profiler`)."""
