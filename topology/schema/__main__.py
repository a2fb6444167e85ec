"""python -m topology.schema > topology/schema/graph-v1.schema.json"""
from topology.schema import generate

print(generate(), end="")
