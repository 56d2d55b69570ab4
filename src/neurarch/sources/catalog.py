"""The bundled offline catalog: published config.json files with provenance.

Each config ships in ``neurarch/catalog/configs/<org>--<name>.json``.
``provenance.tsv`` says where each file came from (tier A: read from the
model's Hub page; B: a verbatim copy in public code, cross-checked; C:
reconstructed from the transformers config class with the published layout).
``checkpoint_counts.tsv`` records the published checkpoint's scalar count
where a public source gives it, with that source.

Both tables ship only what users are shown: where the file or the figure
comes from in their terms (``provenance_for_users``, ``source_for_users``).
The research trail behind each line (the repositories and commits a copy was
found in, what was cross-checked) stays with the project's catalog sources
and is not part of the package, so it can never reach a report.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from .base import CheckpointInfo, ModelSource

# Hub ids that were renamed (the old id still redirects on the Hub).
ALIASES = {
    "openai-community/gpt2": "gpt2",
    "openai-community/gpt2-medium": "gpt2-medium",
    "google-bert/bert-base-uncased": "bert-base-uncased",
    "distilbert/distilbert-base-uncased": "distilbert-base-uncased",
    "google-t5/t5-small": "t5-small",
}

# A count recorded for a sibling checkpoint whose tensors have the same shapes.
COUNT_FOR = {
    "meta-llama/Llama-3.1-70B-Instruct": "meta-llama/Llama-3.1-70B",
}


@dataclass(frozen=True)
class CatalogEntry:
    id: str
    filename: str
    tier: str  # "A", "B" or "C"
    provenance: str  # for users: provenance_for_users
    checkpoint_count: int | None
    checkpoint_source: str | None  # for users: source_for_users
    architecture: str | None
    model_type: str | None

    def config(self) -> dict:
        return json.loads(_configs().joinpath(self.filename).read_text())


def _configs():
    return resources.files("neurarch.catalog").joinpath("configs")


def _tsv(name: str) -> list[dict[str, str]]:
    text = resources.files("neurarch.catalog").joinpath(name).read_text()
    rows = [line for line in text.splitlines() if line and not line.startswith("#")]
    return list(csv.DictReader(rows, delimiter="\t"))


_DATE = re.compile(r"(20\d\d-\d\d-\d\d)")


@lru_cache(maxsize=1)
def entries() -> dict[str, CatalogEntry]:
    prov = {r["model_id"]: r for r in _tsv("provenance.tsv")}
    counts = {r["model_id"]: r for r in _tsv("checkpoint_counts.tsv")}
    out = {}
    for path in sorted(_configs().iterdir(), key=lambda p: p.name):
        if not path.name.endswith(".json"):
            continue
        model_id = path.name[: -len(".json")].replace("--", "/")
        p = prov.get(model_id, {})
        tier = p.get("tier") or "?"
        c = counts.get(COUNT_FOR.get(model_id, model_id)) or counts.get(model_id)
        cfg = json.loads(path.read_text())
        archs = cfg.get("architectures") or [None]
        src = None
        if c:
            src = c["source_for_users"]
            if COUNT_FOR.get(model_id) and COUNT_FOR[model_id] in counts:
                src = f"recorded for {COUNT_FOR[model_id]} (same tensor shapes): {src}"
        out[model_id] = CatalogEntry(
            id=model_id,
            filename=path.name,
            tier=tier,
            provenance=p.get("provenance_for_users") or f"tier {tier}",
            checkpoint_count=int(c["count"]) if c else None,
            checkpoint_source=src,
            architecture=archs[0] if isinstance(archs, list) and archs else None,
            model_type=cfg.get("model_type"),
        )
    return out


def lookup(spec: str) -> CatalogEntry | None:
    e = entries()
    key = ALIASES.get(spec, spec)
    if key in e:
        return e[key]
    # Case-insensitive match, as the Hub resolves ids.
    low = {k.lower(): v for k, v in e.items()}
    return low.get(key.lower())


def load(spec: str) -> ModelSource | None:
    entry = lookup(spec)
    if entry is None:
        return None
    ckpt = None
    if entry.checkpoint_count is not None:
        m = _DATE.search(entry.checkpoint_source or "")
        ckpt = CheckpointInfo(
            scalars=entry.checkpoint_count,
            source=f"catalog record: {entry.checkpoint_source}",
            date=m.group(1) if m else None,
        )
    src = ModelSource(
        id=entry.id,
        kind="catalog",
        provenance=f"bundled catalog, {entry.provenance}",
        config=entry.config(),
        checkpoint=ckpt,
    )
    if entry.tier == "C":
        src.notes.append("catalog config is reconstructed (tier C) from the transformers config class with the published layout: structure fields are right, the key set is not the published file's")
    return src
