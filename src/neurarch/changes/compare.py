"""Pure comparisons of one file's content at two revisions (no I/O here).

Each function takes parsed content (dicts, text, safetensors headers) and
returns the typed pieces of a :class:`~neurarch.changes.types.Change`.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
from typing import Any

from ..sources.tokenizer import TokenizerInfo, tokenizer_info  # noqa: F401  (one reader of tokenizer.json)
from .graph import RENAMES
from .types import KeyChange, TensorChange, WeightsSummary

MAX_TENSORS_LISTED = 50
MISSING = object()


def fingerprint(obj: Any) -> str:
    """A short content id for revert detection (canonical JSON, sha256)."""
    raw = obj if isinstance(obj, (bytes, str)) else json.dumps(obj, sort_keys=True, default=str)
    if isinstance(raw, str):
        raw = raw.encode()
    return hashlib.sha256(raw).hexdigest()[:16]


def show(value: Any, limit: int = 80) -> str:
    """A value as a user reads it in one line (JSON, cut at ``limit`` characters)."""
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- JSON key diff


def key_diff(before: dict | None, after: dict | None, skip: tuple[str, ...] = ()) -> list[KeyChange]:
    """Top-level keys that differ; a transformers 5 rename with the same value is one entry."""
    a, b = dict(before or {}), dict(after or {})
    changes: list[KeyChange] = []
    for old, new in RENAMES.items():
        if old in a and new not in a and new in b and old not in b:
            changes.append(KeyChange(key=new, renamed_from=old, before=a.pop(old), after=b.pop(new)))
    for k in sorted(set(a) | set(b)):
        if k in skip:
            continue
        va, vb = a.get(k, MISSING), b.get(k, MISSING)
        if va is not MISSING and vb is not MISSING and json.dumps(va, sort_keys=True) == json.dumps(vb, sort_keys=True):
            continue
        changes.append(
            KeyChange(
                key=k,
                before=None if va is MISSING else va,
                after=None if vb is MISSING else vb,
                before_present=va is not MISSING,
                after_present=vb is not MISSING,
            )
        )
    return changes


def describe_key(k: KeyChange) -> str:
    if k.renamed_from:
        same = json.dumps(k.before, sort_keys=True) == json.dumps(k.after, sort_keys=True)
        tail = f" (value {show(k.after)} unchanged)" if same else f": {show(k.before)} -> {show(k.after)}"
        return f"`{k.renamed_from}` renamed `{k.key}`{tail}"
    if not k.before_present:
        return f"`{k.key}` added: {show(k.after)}"
    if not k.after_present:
        return f"`{k.key}` removed (was {show(k.before)})"
    return f"`{k.key}`: {show(k.before)} -> {show(k.after)}"


def values_of(data: dict | None, keys: list[KeyChange]) -> dict[str, Any]:
    """The values (or absence) of the keys of a change in ``data``, renames folded together."""
    out = {}
    for k in keys:
        names = [k.key] + ([k.renamed_from] if k.renamed_from else [])
        val = MISSING
        for n in names:
            if data is not None and n in data:
                val = data[n]
                break
        out[k.key] = "<absent>" if val is MISSING else json.dumps(val, sort_keys=True)
    return out


# --------------------------------------------------------------------------- tokenizer


def added_tokens_diff(before: TokenizerInfo | None, after: TokenizerInfo) -> tuple[list[str], list[str]]:
    """Lines for added and removed added-tokens (special ones marked)."""
    old = before.added if before else {}
    added = [f"`{t}` (id {i}{', special' if s else ''})" for t, (i, s) in sorted(after.added.items(), key=lambda x: x[1][0]) if t not in old]
    removed = [f"`{t}` (id {i}{', special' if s else ''})" for t, (i, s) in sorted(old.items(), key=lambda x: x[1][0]) if t not in after.added]
    return added, removed


def special_token(value: Any) -> str | None:
    """A special token as tokenizer_config / special_tokens_map write it (str or {"content": ...})."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def special_ids(tok: TokenizerInfo | None, tok_config: dict | None, special_map: dict | None) -> dict[str, tuple[str, int | None]]:
    """role (bos/eos/pad) -> (token, id in the tokenizer) from tokenizer_config, else special_tokens_map."""
    out = {}
    for role in ("bos", "eos", "pad"):
        key = f"{role}_token"
        token = special_token((tok_config or {}).get(key)) or special_token((special_map or {}).get(key))
        if token is not None:
            out[role] = (token, tok.id_of(token) if tok else None)
    return out


def consistency_findings(tok: TokenizerInfo | None, tok_config: dict | None, special_map: dict | None, config: dict | None, generation: dict | None) -> list[str]:
    """Problems between the tokenizer, the embedding and generation_config at one revision."""
    found = []
    rows = (config or {}).get("vocab_size")
    if tok is not None and isinstance(rows, int) and tok.size > rows:
        found.append(
            f"the tokenizer has {tok.size:,} ids but the embedding has {rows:,} rows (config vocab_size): "
            f"ids {rows:,}..{tok.size - 1:,} index past the embedding (resize the embeddings, or drop the tokens)"
        )
    ids = special_ids(tok, tok_config, special_map)
    for role, (token, tid) in ids.items():
        gen = (generation or {}).get(f"{role}_token_id")
        if gen is None or tid is None:
            continue
        gen_ids = gen if isinstance(gen, list) else [gen]
        if tid not in gen_ids:
            found.append(f"generation_config {role}_token_id {show(gen)} is not the tokenizer's {role.upper()} `{token}` (id {tid})")
    return found


# --------------------------------------------------------------------------- chat template


def template_text(path: str, raw: bytes) -> str | None:
    """The chat template text a file holds (None when it holds none)."""
    if path.endswith(".jinja"):
        return raw.decode("utf-8", errors="replace")
    data = json.loads(raw)
    tpl = data.get("chat_template") if isinstance(data, dict) else None
    if isinstance(tpl, list):  # named templates: [{"name": ..., "template": ...}]
        return "\n".join(f"{{# {t.get('name')} #}}\n{t.get('template', '')}" for t in tpl if isinstance(t, dict))
    return tpl if isinstance(tpl, str) else None


def unified(before: str | None, after: str | None, path: str) -> str:
    """A unified diff of two texts (a last line without a newline is shown like any other)."""
    return "".join(
        difflib.unified_diff(
            [ln + "\n" for ln in (before or "").splitlines()],
            [ln + "\n" for ln in (after or "").splitlines()],
            fromfile=f"a/{path}",
            tofile=f"b/{path}",
            n=2,
        )
    )


# --------------------------------------------------------------------------- weights


def _fmt(dtype: str, shape: tuple[int, ...]) -> str:
    return f"{dtype}[{', '.join(str(d) for d in shape)}]"


def weights_summary(files: list[str], tensors: dict[str, tuple[str, tuple[int, ...]]]) -> WeightsSummary:
    dtypes: dict[str, int] = {}
    for dtype, shape in tensors.values():
        dtypes[dtype] = dtypes.get(dtype, 0) + math.prod(shape)
    return WeightsSummary(files=sorted(files), tensors=len(tensors), scalars=sum(dtypes.values()), dtypes=dtypes)


def weights_diff(before: dict, after: dict) -> tuple[str, list[TensorChange], list[str]]:
    """(kind of change, tensors that changed, detail lines) between two headers."""
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    common = sorted(set(before) & set(after))
    reshaped = [n for n in common if before[n][1] != after[n][1]]
    retyped = [n for n in common if before[n][1] == after[n][1] and before[n][0] != after[n][0]]
    tensors = [TensorChange(name=n, before=None, after=_fmt(*after[n])) for n in added]
    tensors += [TensorChange(name=n, before=_fmt(*before[n]), after=None) for n in removed]
    tensors += [TensorChange(name=n, before=_fmt(*before[n]), after=_fmt(*after[n])) for n in reshaped + retyped]
    lines = []
    if added:
        lines.append(f"{len(added)} tensor(s) added: " + ", ".join(f"`{n}`" for n in added[:5]) + (" ..." if len(added) > 5 else ""))
    if removed:
        lines.append(f"{len(removed)} tensor(s) removed: " + ", ".join(f"`{n}`" for n in removed[:5]) + (" ..." if len(removed) > 5 else ""))
    if reshaped:
        lines.append(f"{len(reshaped)} tensor(s) changed shape: " + ", ".join(f"`{n}` {_fmt(*before[n])} -> {_fmt(*after[n])}" for n in reshaped[:3]) + (" ..." if len(reshaped) > 3 else ""))
    if retyped:
        pairs = sorted({f"{before[n][0]} -> {after[n][0]}" for n in retyped})
        lines.append(f"{len(retyped)} tensor(s) re-saved in another dtype ({', '.join(pairs)}), shapes unchanged")
    if added or removed:
        kind = "tensors"
    elif reshaped:
        kind = "shapes"
    elif retyped:
        kind = "dtype"
    else:
        kind = "resaved"
    return kind, tensors[:MAX_TENSORS_LISTED], lines
