"""python -m witty_profiler.topology.schema > topology/schema/graph-v1.schema.json"""
from witty_profiler.topology.schema import generate

print(generate(), end="")
