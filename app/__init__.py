"""The application layer: the one place the front-ends talk to.

The CLI (`witty_profiler.commands`), the MCP tools (`mcp_server`), the REST routes and /mcp of the service
(`service`) and the public Python API are thin adapters over it: they parse their arguments, call it and
format its answer. It owns graphs by id (`graphs.GraphStore`: files, live windows, imported traces, past
windows, the service's windows through a `Shelf`), the one cache of diagnoses (`workspace.Workspace`, on
`cache.BoundedCache`), the views (`views.convert`), the reports in md, json and html (`reports.report`,
`htmlreport`), the threshold overrides however they were given (`thresholds.overrides`) and who may connect
(`access`: listen addresses, loopback, bearer tokens). The list of layers and views is `topology.layers`, the
lowest part, since the diagnosis and the converters read it too.
"""
