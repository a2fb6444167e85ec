"""Training traces into the topology graph: PyTorch profiler (Kineto) traces and msprof-analyze
cluster outputs become `rank` entities (per-step compute, communication, free time, bubble) and
`collective` entities (per process group and op) joined by `takes_part` edges with each rank's
wait, transit and bandwidth in them. `importer.import_traces` detects each input's format, merges
the readers' fragments and joins the ranks to the processes of a host graph. This package imports
only `topology`.
"""
