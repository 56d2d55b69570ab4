"""Walk a model repo's revisions oldest to newest and type every change.

``track(reader)`` compares the file ids of each revision with the previous one,
reads only the files whose ids changed, and turns each into one typed
:class:`Change` (one file at one commit; the checkpoint's files together are
one ``weights`` change).  A later change that puts the same keys (or the same
file content) back closes the earlier one: ``fixed`` on the earlier,
``reverts`` on the later.  Nothing here raises for one bad revision: a missing
config, an unreadable file or a header that cannot be read becomes a
:class:`RevisionNote` for that revision.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Callable

from ..errors import NeurarchError
from . import compare, graph
from .types import Change, FileId, History, Revision, RevisionNote

CONFIG = "config.json"
GENERATION = "generation_config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
TOKENIZER = "tokenizer.json"
SPECIAL_MAP = "special_tokens_map.json"
PREPROCESSOR = "preprocessor_config.json"
TEMPLATES = ("chat_template.jinja", "chat_template.json")
JSON_FILES = (CONFIG, GENERATION, TOKENIZER_CONFIG, TOKENIZER, SPECIAL_MAP, PREPROCESSOR, "chat_template.json")
WEIGHT_INDEX = "model.safetensors.index.json"
POINTER_ONLY = "weights changed (pointer only, header not available)"


def is_weights(path: str) -> bool:
    return path.endswith(".safetensors") or path.endswith(WEIGHT_INDEX)


def tracked(path: str) -> bool:
    return path in JSON_FILES or path in TEMPLATES or is_weights(path)


class _State:
    """The last content seen of every tracked file (carried across revisions that lack it)."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}  # path -> parsed JSON / text; absent = file absent
        self.ids: dict[str, FileId] = {}
        self.weights: dict | None = None  # tensors of the checkpoint (None: unknown)
        self.weight_files: list[str] = []
        self.weights_fp: str | None = None

    def get(self, path: str):
        return self.data.get(path)


def _parse(path: str, raw: bytes):
    if path.endswith(".jinja"):
        return raw.decode("utf-8", errors="replace")
    return json.loads(raw)


def _findings(state: _State) -> list[str]:
    tok = state.get(TOKENIZER)
    info = compare.tokenizer_info(tok) if isinstance(tok, dict) else None
    return compare.consistency_findings(info, state.get(TOKENIZER_CONFIG), state.get(SPECIAL_MAP), state.get(CONFIG), state.get(GENERATION))


def _template_of(state: _State) -> tuple[str | None, str | None]:
    """(file, text) of the chat template in force: a template file first, else tokenizer_config's key."""
    for path in TEMPLATES:
        val = state.get(path)
        if isinstance(val, str) and path.endswith(".jinja"):
            return path, val
        if isinstance(val, dict):
            text = compare.template_text(path, json.dumps(val).encode())
            if text is not None:
                return path, text
    tc = state.get(TOKENIZER_CONFIG)
    if isinstance(tc, dict):
        text = compare.template_text(TOKENIZER_CONFIG, json.dumps(tc).encode())
        if text is not None:
            return TOKENIZER_CONFIG, text
    return None, None


class Tracker:
    def __init__(self, reader, since: datetime | None = None, progress: Callable[[str], None] | None = None, plan=None):
        self.reader = reader
        self.since = since
        self.plan = plan  # neurarch Options with a plan: graph changes get the plan at both revisions
        self.progress = progress or (lambda _msg: None)
        self.notes: list[RevisionNote] = []
        self.changes: list[Change] = []

    # -- one revision
    def _note(self, commit: str, message: str) -> None:
        self.notes.append(RevisionNote(commit=commit, message=message))

    def _load(self, rev: Revision, ids: dict[str, FileId], path: str, state: _State) -> bool:
        """Read ``path`` at ``rev`` into state; False (with a note) when it cannot be read."""
        try:
            raw = self.reader.read(rev.commit, ids[path])
            data = _parse(path, raw)
            if path.endswith(".json") and not isinstance(data, dict):
                self._note(rev.commit, f"{path}: not a JSON object ({type(data).__name__}); compared with the last readable version")
                return False
            state.data[path] = data
            return True
        except (ValueError, UnicodeDecodeError) as e:
            self._note(rev.commit, f"{path}: not valid JSON ({str(e).splitlines()[0]}); compared with the last readable version")
        except NeurarchError as e:
            self._note(rev.commit, f"{path}: could not be read ({e})")
        return False

    def _change(self, rev: Revision, parent: Revision, kind: str, file_: str, summary: str, **kw) -> Change:
        c = Change(kind=kind, file=file_, commit=rev.commit, parent=parent.commit, date=rev.date, summary=summary, **kw)
        self.changes.append(c)
        return c

    def _revision(self, rev: Revision, parent: Revision | None, ids: dict[str, FileId], state: _State) -> None:
        old_ids = state.ids
        changed = sorted(p for p in set(ids) | set(old_ids) if tracked(p) and (old_ids[p].key if p in old_ids else None) != (ids[p].key if p in ids else None))
        before = {p: state.data.get(p) for p in state.data}
        findings_before = set(_findings(state)) if parent else set()
        template_before = _template_of(state)
        readable: dict[str, bool] = {}
        for p in changed:
            if is_weights(p) and not p.endswith(".json"):
                continue
            if p in ids:
                readable[p] = self._load(rev, ids, p, state)
            elif p != CONFIG:  # a config that goes missing stays the baseline for the next one
                state.data.pop(p, None)
                readable[p] = True
        if CONFIG not in ids:
            self._note(rev.commit, "no config.json at this revision")
        state.ids = ids
        weights_changed = [p for p in changed if is_weights(p)]
        if parent is None:  # the first revision read is the baseline
            self._weights(rev, None, ids, state, weights_changed or [p for p in ids if is_weights(p)])
            return
        findings_now = _findings(state)
        new_findings = [f for f in findings_now if f not in findings_before]
        used_findings = False

        def take_findings() -> list[str]:
            nonlocal used_findings
            if used_findings:
                return []
            used_findings = True
            return new_findings

        for p in changed:
            if not readable.get(p, True) or is_weights(p):
                continue
            old, new = before.get(p), state.data.get(p)
            if p == CONFIG:
                if p not in ids or not isinstance(new, dict):
                    continue  # noted above; the next config is compared with the last one seen
                self._config(rev, parent, old, new)
            elif p == GENERATION:
                keys = compare.key_diff(old, new)
                if keys:
                    self._change(rev, parent, "generation_config", p, f"generation config: {_keys_line(keys)}", keys=keys, details=[compare.describe_key(k) for k in keys], findings=take_findings())
            elif p == PREPROCESSOR:
                keys = compare.key_diff(old, new)
                if keys:
                    self._change(rev, parent, "preprocessor", p, f"preprocessor config: {_keys_line(keys)}", keys=keys, details=[compare.describe_key(k) for k in keys])
            elif p in (TOKENIZER_CONFIG, SPECIAL_MAP):
                keys = compare.key_diff(old, new, skip=("chat_template",))
                if keys:
                    self._change(rev, parent, "tokenizer", p, f"tokenizer settings: {_keys_line(keys)}", keys=keys, details=[_describe_tokenizer_key(k) for k in keys], findings=take_findings())
            elif p == TOKENIZER:
                self._tokenizer(rev, parent, old, new, take_findings())
        template_after = _template_of(state)
        if template_before[1] != template_after[1] and any(p in changed for p in (*TEMPLATES, TOKENIZER_CONFIG)):
            self._template(rev, parent, template_before, template_after)
        if new_findings and not used_findings:
            # the tokenizer now disagrees with a config or generation change made at this revision
            for c in reversed(self.changes):
                if c.commit == rev.commit:
                    c.findings.extend(new_findings)
                    break
        if weights_changed:
            self._weights(rev, parent, ids, state, weights_changed)

    # -- per kind
    def _config(self, rev: Revision, parent: Revision, old: dict | None, new: dict) -> None:
        if old is None:
            self._change(rev, parent, "config", CONFIG, "config.json added", impact="unknown", fingerprint_after=compare.fingerprint(new))
            return
        keys = compare.key_diff(old, new)
        if not keys:
            return
        self.progress(f"building both sides of config.json at {rev.commit[:12]}")
        impact, fig_a, fig_b, settings = graph.compare(old, new)
        details = [compare.describe_key(k) for k in keys]
        if impact == "graph":
            pa, pb = fig_a.parameters or 0, fig_b.parameters or 0
            summary = f"config changes the model: {_keys_line(keys)}; parameters {pa:,} -> {pb:,} ({pb - pa:+,})"
            details.append(f"built both revisions: parameters {pa:,} -> {pb:,} ({pb - pa:+,}), layer-table rows {fig_a.layers} -> {fig_b.layers}")
        elif impact == "numerics":
            summary = f"config changes what the model computes (same layers and shapes): {_keys_line(keys)}"
            details.append("built both revisions: the same layers and parameter count; transformers reads different settings: " + ", ".join(f"`{s}`" for s in settings))
        elif impact == "cosmetic":
            summary = f"config edited, same model: {_keys_line(keys)}"
            details.append("built both revisions: the same model with the same settings (cosmetic)")
        else:
            summary = f"config changed: {_keys_line(keys)} (one revision could not be built)"
            for side, fig in (("before", fig_a), ("after", fig_b)):
                if fig.error:
                    details.append(f"the config {side} this commit does not build: {fig.error}")
        plan = None
        if impact == "graph" and self.plan is not None:
            from ..errors import NeurarchError as _E
            from . import plandiff

            self.progress(f"planning both sides of config.json at {rev.commit[:12]}")
            try:
                plan = plandiff.diff_configs(old, new, self.plan, parent.commit[:12], rev.commit[:12])
            except _E as e:
                details.append(f"the plan could not be made: {e}")
            else:
                for f in plan.stop_fitting:
                    details.append(f"stops fitting: {f.card} {plandiff.MODE_TITLE.get(f.mode, f.mode)} (largest batch {f.before} -> 0)")
                for f in plan.start_fitting:
                    details.append(f"starts fitting: {f.card} {plandiff.MODE_TITLE.get(f.mode, f.mode)} (largest batch 0 -> {f.after})")
        self._change(
            rev,
            parent,
            "config",
            CONFIG,
            summary,
            impact=impact,
            keys=keys,
            before=fig_a,
            after=fig_b,
            plan=plan,
            details=details,
            fingerprint_before=compare.fingerprint(old),
            fingerprint_after=compare.fingerprint(new),
        )

    def _tokenizer(self, rev: Revision, parent: Revision, old: dict | None, new: dict | None, findings: list[str]) -> None:
        if new is None:
            self._change(rev, parent, "tokenizer", TOKENIZER, "tokenizer.json removed", findings=findings)
            return
        a = compare.tokenizer_info(old) if isinstance(old, dict) else None
        b = compare.tokenizer_info(new)
        added, removed = compare.added_tokens_diff(a, b)
        details = []
        if added:
            details.append(f"{len(added)} token(s) added: " + ", ".join(added[:10]) + (" ..." if len(added) > 10 else ""))
        if removed:
            details.append(f"{len(removed)} token(s) removed: " + ", ".join(removed[:10]) + (" ..." if len(removed) > 10 else ""))
        if a is None or a.size != b.size:
            details.append(f"tokenizer ids: {a.size if a else 0:,} -> {b.size:,}")
        if a is not None and a.vocab != b.vocab:
            details.append(f"base vocabulary changed ({len(a.vocab):,} -> {len(b.vocab):,} entries)")
        if not details:
            details.append("tokenizer.json re-saved (normaliser, pre-tokeniser or decoder settings), same vocabulary and added tokens")
        parts = []
        if added:
            parts.append(f"{len(added)} token(s) added")
        if removed:
            parts.append(f"{len(removed)} removed")
        summary = "tokenizer: " + (", ".join(parts) if parts else "re-saved") + (f"; ids {a.size:,} -> {b.size:,}" if a and a.size != b.size else "")
        self._change(
            rev,
            parent,
            "tokenizer",
            TOKENIZER,
            summary,
            details=details,
            findings=findings,
            fingerprint_before=compare.fingerprint(old) if old is not None else None,
            fingerprint_after=compare.fingerprint(new),
        )

    def _template(self, rev: Revision, parent: Revision, before: tuple, after: tuple) -> None:
        file = after[0] or before[0] or TOKENIZER_CONFIG
        lines: list[str] = []
        if before[1] is None:
            summary, lines = f"chat template added ({file})", []
        elif after[1] is None:
            summary, lines = f"chat template removed (was in {before[0]})", []
        else:
            diff = compare.unified(before[1], after[1], file)
            plus = sum(1 for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++"))
            minus = sum(1 for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---"))
            summary, lines = f"chat template changed ({file}: +{plus} -{minus} lines)", []
            if before[0] != after[0]:
                lines.append(f"the template moved from {before[0]} to {after[0]}")
        diff = compare.unified(before[1], after[1], file)
        self._change(
            rev,
            parent,
            "chat_template",
            file,
            summary,
            details=lines,
            template_diff=diff,
            fingerprint_before=compare.fingerprint(before[1] or ""),
            fingerprint_after=compare.fingerprint(after[1] or ""),
        )

    def _weights(self, rev: Revision, parent: Revision | None, ids: dict[str, FileId], state: _State, changed: list[str]) -> None:
        files = sorted(p for p in ids if p.endswith(".safetensors"))
        fp = compare.fingerprint(sorted(ids[p].key for p in files))
        merged: dict = {}
        tensors: dict | None = merged
        pointer_only = False
        for p in files:
            try:
                h = self.reader.header(rev.commit, ids[p])
            except NeurarchError as e:
                self._note(rev.commit, f"{p}: safetensors header could not be read ({e})")
                tensors = None
                break
            if h is None:
                pointer_only = True
                tensors = None
                break
            merged.update(h)
        old_tensors, old_files, old_fp = state.weights, state.weight_files, state.weights_fp
        state.weights, state.weight_files, state.weights_fp = tensors, files, fp
        if parent is None or not [p for p in changed if p.endswith(".safetensors")]:
            return
        label = ", ".join(files) if files else ", ".join(old_files) or "model.safetensors"
        common = dict(fingerprint_before=old_fp, fingerprint_after=fp)
        if not files:
            self._change(
                rev,
                parent,
                "weights",
                label,
                "weights removed: no safetensors file at this revision",
                weights_before=compare.weights_summary(old_files, old_tensors) if old_tensors else None,
                **common,
            )
            return
        if pointer_only or tensors is None or old_tensors is None:
            why = POINTER_ONLY if pointer_only else "weights changed (a safetensors header could not be read)"
            if not pointer_only and old_tensors is None and tensors is not None:
                why = "weights changed (the earlier header is not available)"
            self._change(rev, parent, "weights", label, why, weights_after=compare.weights_summary(files, tensors) if tensors else None, **common)
            return
        kind, tchanges, lines = compare.weights_diff(old_tensors, tensors)
        wa, wb = compare.weights_summary(old_files, old_tensors), compare.weights_summary(files, tensors)
        total = f"checkpoint {wa.scalars:,} -> {wb.scalars:,} scalars"
        if kind == "dtype":
            pairs = sorted({f"{old_tensors[t.name][0]} -> {tensors[t.name][0]}" for t in tchanges})
            summary = f"weights re-saved in another dtype ({', '.join(pairs)}): same {wb.tensors} tensors and shapes; {total}"
        elif kind == "resaved":
            summary = f"weights re-saved: same {wb.tensors} tensors, shapes and dtypes; {total}"
            if old_files != files:
                lines.append(f"sharding changed: {', '.join(old_files)} -> {', '.join(files)}")
            else:
                lines.append("the tensor data changed (the header is the same)")
        elif kind == "shapes":
            summary = f"weights changed shape: {sum(1 for t in tchanges if t.before and t.after)} tensor(s); {total}"
        else:
            summary = f"weights: tensors added or removed; {total}"
        if old_files != files and kind != "resaved":
            lines.append(f"files: {', '.join(old_files)} -> {', '.join(files)}")
        lines.append(total)
        self._change(rev, parent, "weights", label, summary, details=lines, tensors=tchanges, weights_before=wa, weights_after=wb, **common)

    # -- the walk
    def run(self, revisions: list[Revision]) -> None:
        """``revisions`` oldest first."""
        state = _State()
        parent = None
        for rev in revisions:
            self.progress(f"reading {rev.commit[:12]} {rev.title[:60]}")
            try:
                ids = {p: f for p, f in self.reader.files(rev.commit).items() if tracked(p)}
            except NeurarchError as e:
                self._note(rev.commit, f"file list could not be read ({e}); this revision was skipped")
                continue
            self._revision(rev, parent, ids, state)
            parent = rev


def link_reverts(changes: list[Change], history_data: dict[str, list[tuple[str, dict | None]]] | None = None) -> None:
    """Set ``fixed``/``reverts`` where a later change puts the same keys or content back (oldest first)."""
    for i, c in enumerate(changes):
        if c.vanished:
            continue
        later = [d for d in changes[i + 1 :] if d.kind == c.kind and d.file == c.file and not d.vanished]
        if c.keys:
            want = {k.key: _before_val(k) for k in c.keys}
            current = {k.key: _after_val(k) for k in c.keys}
            for d in later:
                for k in d.keys:
                    if k.key in current:
                        current[k.key] = _after_val(k)
                    elif k.renamed_from in current:
                        current[k.renamed_from] = _after_val(k)
                if current == want:
                    c.fixed, d.reverts = d.commit, d.reverts or c.commit
                    break
        elif c.fingerprint_before:
            for d in later:
                if d.fingerprint_after == c.fingerprint_before:
                    c.fixed, d.reverts = d.commit, d.reverts or c.commit
                    break


def _describe_tokenizer_key(k) -> str:
    """added_tokens_decoder ({id: {"content", "special"}}) as tokens added and removed; other keys as usual."""
    if k.key != "added_tokens_decoder" or not isinstance(k.before or {}, dict) or not isinstance(k.after or {}, dict):
        return compare.describe_key(k)

    def tokens(d):
        return {str(v.get("content")): (i, bool(v.get("special"))) for i, v in (d or {}).items() if isinstance(v, dict)}

    a, b = tokens(k.before), tokens(k.after)
    parts = []
    added = [f"`{t}` (id {i}{', special' if s else ''})" for t, (i, s) in b.items() if t not in a]
    removed = [f"`{t}` (id {i}{', special' if s else ''})" for t, (i, s) in a.items() if t not in b]
    moved = [f"`{t}` id {a[t][0]} -> {b[t][0]}" for t in a if t in b and a[t][0] != b[t][0]]
    if added:
        parts.append(f"{len(added)} token(s) added: " + ", ".join(added[:10]) + (" ..." if len(added) > 10 else ""))
    if removed:
        parts.append(f"{len(removed)} token(s) removed: " + ", ".join(removed[:10]) + (" ..." if len(removed) > 10 else ""))
    if moved:
        parts.append("ids changed: " + ", ".join(moved[:10]))
    return "`added_tokens_decoder`: " + ("; ".join(parts) if parts else "token flags changed (same tokens and ids)")


def _before_val(k) -> str:
    return json.dumps(k.before, sort_keys=True) if k.before_present else "<absent>"


def _after_val(k) -> str:
    return json.dumps(k.after, sort_keys=True) if k.after_present else "<absent>"


def _keys_line(keys) -> str:
    names = [f"{k.renamed_from}->{k.key}" if k.renamed_from else k.key for k in keys]
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def track(reader, since: datetime | None = None, progress: Callable[[str], None] | None = None, plan=None) -> History:
    """Read every revision of ``reader``'s repo and return the typed changes, newest first.

    With ``since``, the revisions from that date on are reported, each compared
    with the revision before it (read as the baseline, not reported).
    """
    revs, truncated, notes = reader.revisions()
    oldest_first = list(reversed(revs))
    if since is not None:
        keep = [i for i, r in enumerate(oldest_first) if r.date >= since]
        start = max(keep[0] - 1, 0) if keep else len(oldest_first)
        walk = oldest_first[start:] if keep else []
    else:
        walk = oldest_first
    tracker = Tracker(reader, since, progress, plan)
    tracker.run(walk)
    changes = tracker.changes
    link_reverts(changes)
    if since is not None:
        changes = [c for c in changes if c.date >= since]
        reported = [r for r in revs if r.date >= since]
        tracker.notes = [n for n in tracker.notes if n.commit is None or any(r.commit == n.commit for r in reported)]
    else:
        reported = revs
    return History(
        repo=reader.repo,
        source=reader.source,
        url=reader.url,
        revisions=reported,
        changes=list(reversed(changes)),
        notes=notes + tracker.notes,
        truncated=truncated,
        since=since,
    )
