"""The JSON schema document is in sync with the report type, and every stable
path documented in docs/json.md exists in the schema."""

import json
import re
from pathlib import Path

from neurarch.report import SCHEMA_VERSION, Report

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_schema_file_is_current():
    committed = json.loads((DOCS / "report.schema.json").read_text())
    assert committed == Report.model_json_schema(), "run: python -m neurarch.report > docs/report.schema.json"


def _resolve(schema, path):
    defs = schema.get("$defs", {})
    node = schema
    for part in path.replace("[]", "").split("."):
        while True:
            if "$ref" in node:
                node = defs[node["$ref"].split("/")[-1]]
            elif "anyOf" in node:
                node = next(x for x in node["anyOf"] if x.get("type") != "null")
            elif node.get("type") == "array":
                node = node["items"]
            else:
                break
        assert part in node.get("properties", {}), f"{path}: no {part}"
        node = node["properties"][part]


def test_documented_paths_exist():
    doc = (DOCS / "json.md").read_text()
    paths = re.findall(r"^\| `([a-z_.\[\]]+)` \|", doc, flags=re.M)
    assert len(paths) > 30
    schema = Report.model_json_schema()
    for p in paths:
        _resolve(schema, p)
    assert f'`"{SCHEMA_VERSION}"`' in doc
