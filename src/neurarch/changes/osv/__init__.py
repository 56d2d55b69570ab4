"""One OSV record per typed change (OSV schema 1.7.5, vendored here as ``schema.json``).

* ``id``: ``x_NEURARCH-`` + 20 hex of sha256(repo URL, parent commit, commit, file, kind):
  the same repo, commits and file give the same id on every run;
* ``published``: the commit time; ``modified``: the time of the latest commit the
  record names (the ``fixed`` commit where there is one), so records are stable;
* ``affected[0].ranges[0]``: type ``GIT``, ``repo`` the model repo's URL, ``introduced``
  the full commit, ``fixed`` the later commit that puts the same keys (or file) back;
* everything of neurarch's own sits under ``database_specific``.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from functools import lru_cache
from importlib import resources
from typing import Any

from ..types import Change, History

SCHEMA_VERSION = "1.7.5"
ID_PREFIX = "x_NEURARCH-"
# ossf/osv-schema commit the vendored schema.json comes from (see README.md beside it).
SCHEMA_COMMIT = "51b8156b69b9e2e9ff2301e649db61636067fcfa"

KIND_TITLE = {
    "config": "config",
    "tokenizer": "tokenizer",
    "chat_template": "chat template",
    "generation_config": "generation config",
    "preprocessor": "preprocessor config",
    "weights": "weights",
}


def rfc3339(dt: datetime) -> str:
    """RFC 3339 in UTC with a ``Z`` (a naive time is taken as UTC)."""
    dt = dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def record_id(url: str, change: Change) -> str:
    raw = "\0".join([url, change.parent or "0", change.commit, change.file, change.kind])
    return ID_PREFIX + hashlib.sha256(raw.encode()).hexdigest()[:20].upper()


def details_markdown(change: Change, history: History) -> str:
    lines = [f"**{KIND_TITLE[change.kind]}** change in `{change.file}` of `{history.repo}` at commit `{change.commit}`" + (f" (compared with `{change.parent}`)." if change.parent else ".")]
    lines.append("")
    lines += [f"- {d}" for d in change.details]
    if change.findings:
        lines.append("")
        lines.append("Problems at this revision:")
        lines += [f"- {f}" for f in change.findings]
    if change.template_diff:
        lines += ["", "```diff", change.template_diff.rstrip("\n"), "```"]
    if change.fixed:
        lines += ["", f"Commit `{change.fixed}` puts the earlier value back."]
    if change.reverts:
        lines += ["", f"This undoes the change of commit `{change.reverts}`."]
    if change.vanished:
        lines += ["", "This commit is no longer in the repo's history (the history was rewritten)."]
    return "\n".join(lines)


def to_osv(change: Change, history: History, fixed_date: datetime | None = None) -> dict[str, Any]:
    """The OSV record of one change (a plain dict, ready for ``json.dumps``)."""
    events: list[dict[str, str]] = [{"introduced": change.commit}]
    if change.fixed:
        events.append({"fixed": change.fixed})
    modified = max(change.date, fixed_date) if fixed_date else change.date
    record: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "id": record_id(history.url, change),
        "modified": rfc3339(modified),
        "published": rfc3339(change.date),
        "summary": f"{history.repo}: {change.summary}"[:400],
        "details": details_markdown(change, history),
        "affected": [{"ranges": [{"type": "GIT", "repo": history.url, "events": events}]}],
        "database_specific": {
            "kind": change.kind,
            "file": change.file,
            "model": history.repo,
            "source": history.source,
            "parent": change.parent,
            "impact": change.impact,
            "keys": [k.model_dump(mode="json") for k in change.keys],
            "findings": list(change.findings),
            "reverts": change.reverts,
            "vanished": change.vanished,
        },
    }
    if change.before or change.after:
        record["database_specific"]["built"] = {
            "before": change.before.model_dump(mode="json") if change.before else None,
            "after": change.after.model_dump(mode="json") if change.after else None,
        }
    if change.weights_before or change.weights_after:
        record["database_specific"]["weights"] = {
            "before": change.weights_before.model_dump(mode="json") if change.weights_before else None,
            "after": change.weights_after.model_dump(mode="json") if change.weights_after else None,
        }
    if history.url.startswith(("https://", "http://")):
        refs = [{"type": "WEB", "url": f"{history.url}/commit/{change.commit}"}]
        if change.fixed:
            refs.append({"type": "FIX", "url": f"{history.url}/commit/{change.fixed}"})
        record["references"] = refs
    return record


def records(history: History) -> list[dict[str, Any]]:
    """Every change's record, newest first."""
    dates = {r.commit: r.date for r in history.revisions}
    return [to_osv(c, history, dates.get(c.fixed) if c.fixed else None) for c in history.changes]


@lru_cache(maxsize=1)
def schema() -> dict:
    return json.loads(resources.files(__package__).joinpath("schema.json").read_text(encoding="utf-8"))


def validate(record: dict) -> None:
    """Raise jsonschema.ValidationError when ``record`` does not follow the OSV schema."""
    import jsonschema

    jsonschema.Draft202012Validator(schema(), format_checker=jsonschema.FormatChecker()).validate(record)
