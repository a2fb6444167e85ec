"""Sources: graphs built from what another system already recorded, for a past window.

Where collectors/ read this host now, a source reads a monitoring system's store (Prometheus's
HTTP API) and builds the same entities, with the same ids and metric names, for many hosts at
once. A source imports only topology, so a graph from it is judged by the same diagnosis.
"""
