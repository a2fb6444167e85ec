"""Collectors: one module per observation domain, each turning what the host shows into a graph fragment.

Every collector follows `collectors.base.Collector`: `start` reads counters and topology at the
beginning of the window, `sample` reads cheap counters every interval, `finish` reads the end
state and returns a fragment (a `topology.Graph`) of rates and utilisations over the window. Each
reports its own `CollectorStatus` (ok, partial, unavailable, error) with a one-line reason; a
collector never stops the round. Parsing of /proc, /sys and tool output lives in pure functions
tested on recorded real files.
"""
