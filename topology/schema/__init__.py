"""The JSON Schema of graph format v1, generated from `topology.schema.document` (see `generate`)."""

from __future__ import annotations

import json
from pathlib import Path

SCHEMA_PATH = Path(__file__).with_name("graph-v1.schema.json")


def generate() -> str:
    from witty_profiler.topology.schema.document import GraphDocument
    schema = GraphDocument.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://witty-profiler/schemas/graph-v1.schema.json"
    schema["title"] = "witty-profiler graph format v1"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def load() -> dict:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


