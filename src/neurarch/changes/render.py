"""A :class:`History` as text, Markdown, JSON or an OSV array (printing only; nothing computed here)."""

from __future__ import annotations

import json

from . import osv
from .types import Change, History


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "-"


def _headline(h: History) -> str:
    n, m = len(h.revisions), len(h.changes)
    since = f" since {h.since.date().isoformat()}" if h.since else ""
    return f"{h.repo}: {n} revision{'s' * (n != 1)} read{since}, {m} change{'s' * (m != 1)}"


def _by_commit(h: History) -> dict[str, list[Change]]:
    out: dict[str, list[Change]] = {}
    for c in h.changes:
        out.setdefault(c.commit, []).append(c)
    return out


def _links(c: Change) -> str:
    bits = []
    if c.reverts:
        bits.append(f"undoes {_short(c.reverts)}")
    if c.fixed:
        bits.append(f"put back by {_short(c.fixed)}")
    if c.vanished:
        bits.append("commit no longer in the history")
    return f" ({'; '.join(bits)})" if bits else ""


def text(h: History) -> str:
    out = [_headline(h), f"source: {h.url}"]
    if h.truncated:
        out.append("the commit list was cut short: older revisions were not read")
    if h.rewritten:
        out.append(f"history rewritten: {len(h.rewritten)} commit(s) read before are gone: " + ", ".join(_short(s) for s in h.rewritten[:5]))
    notes: dict[str | None, list[str]] = {}
    for n in h.notes:
        notes.setdefault(n.commit, []).append(n.message)
    for msg in notes.get(None, []):
        out.append(f"note: {msg}")
    changes = _by_commit(h)
    for r in h.revisions:
        out.append("")
        out.append(f"{r.date.strftime('%Y-%m-%d %H:%M')}Z  {_short(r.commit)}  {r.title}")
        for c in changes.get(r.commit, []):
            out.append(f"  {c.kind:<17} {c.summary}{_links(c)}")  # the summary says the impact
            for d in c.details:
                out.append(f"      - {d.replace('`', '')}")
            for f in c.findings:
                out.append(f"      ! {f.replace('`', '')}")
            if c.template_diff:
                out += ["      " + ln for ln in c.template_diff.rstrip("\n").splitlines()]
            if c.plan is not None:
                from . import plandiff

                out += ["      " + ln for ln in plandiff.text(c.plan).splitlines()[3:] if ln.strip()]
        for msg in notes.get(r.commit, []):
            out.append(f"  note: {msg}")
        if r.commit not in changes and r.commit not in notes and r is not h.revisions[-1]:
            out.append("  no tracked file changed")
        elif r is h.revisions[-1] and r.commit not in changes:
            out.append("  (oldest revision read: the baseline)")
    return "\n".join(out)


def markdown(h: History) -> str:
    out = [f"## What changed upstream: `{h.repo}`", "", _headline(h).split(": ", 1)[1] + f" ([repo]({h.url}))." if h.url.startswith("http") else _headline(h).split(": ", 1)[1] + "."]
    if h.truncated:
        out += ["", "> The commit list was cut short: older revisions were not read."]
    if h.rewritten:
        out += ["", f"> History rewritten: {len(h.rewritten)} commit(s) read before are gone ({', '.join('`' + _short(s) + '`' for s in h.rewritten[:5])})."]
    for n in h.notes:
        if n.commit is None:
            out += ["", f"> {n.message}"]
    if h.changes:
        out += ["", "| Date | Commit | Kind | What changed |", "|---|---|---|---|"]
        for c in h.changes:
            out.append(f"| {c.date.date().isoformat()} | `{_short(c.commit)}` | {osv.KIND_TITLE[c.kind]} | {c.summary.replace('|', '/')}{_links(c)} |")
    notes: dict[str, list[str]] = {}
    for n in h.notes:
        if n.commit:
            notes.setdefault(n.commit, []).append(n.message)
    for c in h.changes:
        out += ["", f"### {c.date.date().isoformat()} `{_short(c.commit)}` {osv.KIND_TITLE[c.kind]}: `{c.file}`", "", c.summary + _links(c)]
        if c.details:
            out.append("")
            out += [f"- {d}" for d in c.details]
        if c.findings:
            out.append("")
            out += [f"- **Problem:** {f}" for f in c.findings]
        if c.template_diff:
            out += ["", "```diff", c.template_diff.rstrip("\n"), "```"]
        if c.plan is not None:
            from . import plandiff

            body = plandiff.markdown(c.plan).split("\n", 4)[4]  # without the title and the config line
            out += ["", "The plan at both revisions:", "", body.rstrip("\n")]
    if notes:
        out += ["", "### Revisions not fully read", ""]
        for commit, msgs in notes.items():
            out += [f"- `{_short(commit)}`: {m}" for m in msgs]
    return "\n".join(out) + "\n"


def as_json(h: History) -> str:
    return h.model_dump_json(indent=2)


def as_osv(h: History) -> str:
    return json.dumps(osv.records(h), indent=2)


def render(h: History, fmt: str) -> str:
    return {"text": text, "markdown": markdown, "json": as_json, "osv": as_osv}[fmt](h)
