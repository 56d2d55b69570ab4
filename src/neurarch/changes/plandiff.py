"""``diff A B``: two sources analysed with the same options, side by side.

A side is anything :func:`neurarch.analyze` takes (hub id, catalog id,
config.json, model folder), or ``SPEC@REV``: a hub repo at a revision, or a
config.json / model folder inside a git clone at a commit (read with
``git show REV:path``, so a pull request's base and head can be compared
without checking either out).  With a plan, each side carries parameters,
memory per mode, the largest batch per card and the cost; the diff lists the
cards that stop (or start) holding batch 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from . import compare
from .errors import ChangesError, RevisionError
from .types import CardFlip, PlanDiff, Side

MODES = ("full", "lora", "qlora", "inference")
MODE_TITLE = {"full": "full fine-tuning", "lora": "LoRA", "qlora": "QLoRA", "inference": "inference"}


# --------------------------------------------------------------------------- resolving a side


def _git_show(path: Path, rev: str, spec: str) -> bytes:
    """``git show REV:path`` for a file inside a git clone (config.json of a folder)."""
    folder = path if path.is_dir() else path.parent
    target = "config.json" if path.is_dir() else path.name
    try:
        top = subprocess.run(["git", "-C", str(folder), "rev-parse", "--show-prefix"], capture_output=True, timeout=30)
    except FileNotFoundError:
        raise ChangesError(spec, "the git binary is not installed") from None
    if top.returncode != 0:
        raise ChangesError(spec, f"{folder} is not inside a git clone, so {spec!r} names no revision")
    rel = top.stdout.decode().strip() + target
    out = subprocess.run(["git", "-C", str(folder), "show", f"{rev}:{rel}"], capture_output=True, timeout=30)
    if out.returncode != 0:
        msg = out.stderr.decode(errors="replace").strip().splitlines()
        if msg and ("invalid object name" in msg[0] or "unknown revision" in msg[0] or "bad revision" in msg[0]):
            raise RevisionError(spec, rev)
        raise ChangesError(spec, f"no {rel} at revision {rev!r}" + (f" ({msg[0]})" if msg else ""))
    return out.stdout


def analyze_side(spec: str, options):
    """(report, config dict) of one side."""
    from dataclasses import replace

    from .. import analyze

    spec = spec.strip()
    if not spec:
        raise ChangesError(repr(spec), "an empty source")
    if os.path.exists(spec) or "@" not in spec:
        report = analyze(spec, options)
        return report, _config_of(spec, report)
    base, _, rev = spec.rpartition("@")
    if not base or not rev:
        raise ChangesError(spec, "expected SOURCE@REVISION")
    if os.path.exists(base):
        raw = _git_show(Path(base).resolve(), rev, spec)
        try:
            cfg = json.loads(raw)
        except ValueError as e:
            raise ChangesError(spec, f"config.json at {rev!r} is not valid JSON ({e})") from None
        with tempfile.TemporaryDirectory(prefix="neurarch-diff-") as tmp:
            path = Path(tmp) / "config.json"
            path.write_bytes(raw)
            report = analyze(str(path), options)
        return report, cfg if isinstance(cfg, dict) else {}
    report = analyze(base, replace(options, revision=rev))
    return report, _config_of(base, report, rev)


def _config_of(spec: str, report, revision: str | None = None) -> dict:
    """The config a side was built from, when it can be read again cheaply (local files and the catalog)."""
    p = Path(spec)
    for cand in (p, p / "config.json"):
        if cand.is_file() and cand.suffix == ".json":
            try:
                data = json.loads(cand.read_text())
                return data if isinstance(data, dict) else {}
            except (OSError, ValueError):
                return {}
    try:
        from ..sources import resolve

        src = resolve(spec, revision=revision, offline=True)  # from the cache analyze just filled
        return dict(getattr(src, "config", {}) or {})
    except Exception:
        return {}


def side_of(spec: str, report, config: dict) -> Side:
    """The figures of one report that the diff compares (read defensively: the report grows)."""
    params = getattr(report, "params", None)
    s = Side(
        spec=spec,
        provenance=getattr(report.model, "provenance", None),
        model_class=getattr(report.model, "model_class", None),
        parameters=getattr(params, "parameters", None),
        checkpoint=getattr(params, "checkpoint", None),
        layers=len(getattr(getattr(report, "structure", None), "nodes", []) or []),
        config=config,
    )
    inp = getattr(report, "input", None)
    if inp is not None:
        s.batch, s.seq_len = getattr(inp, "batch", None), getattr(inp, "seq_len", None)
    mem = getattr(report, "memory", None)
    if mem is not None:
        for mode in MODES:
            m = getattr(mem, mode, None)
            if m is not None and getattr(m, "peak_bytes", None) is not None:
                s.memory[mode] = int(m.peak_bytes)
        s.memory_errors = dict(getattr(mem, "errors", {}) or {})
    for card in getattr(report, "cards", []) or []:
        s.max_batch[card.name] = dict(getattr(card, "max_batch", {}) or {})
    cost = getattr(report, "cost", None)
    if cost is not None and getattr(cost, "headline", None) is not None:
        s.cost_card, s.cost_usd, s.cost_hours = cost.headline.card, cost.headline.usd, cost.headline.run_hours
        for card in getattr(cost, "cards", []) or []:
            if getattr(card, "name", None) == getattr(cost, "cheapest", None) and card.usd is not None:
                s.cheapest_card, s.cheapest_usd, s.cheapest_hours = card.name, card.usd, card.run_hours
    return s


def diff(spec_a: str, spec_b: str, options) -> PlanDiff:
    ra, ca = analyze_side(spec_a, options)
    rb, cb = analyze_side(spec_b, options)
    a, b = side_of(spec_a, ra, ca), side_of(spec_b, rb, cb)
    d = PlanDiff(a=a, b=b, keys=compare.key_diff(ca, cb) if (ca or cb) else [], planned=bool(a.memory or b.memory or a.max_batch))
    d.stop_fitting, d.start_fitting = flips(a, b)
    return d


def diff_configs(cfg_a: dict, cfg_b: dict, options, label_a: str, label_b: str) -> PlanDiff:
    """The diff of two config dicts (the tracker's two revisions of one config.json)."""
    from .. import analyze

    with tempfile.TemporaryDirectory(prefix="neurarch-diff-") as tmp:
        sides = []
        for name, cfg, label in (("a", cfg_a, label_a), ("b", cfg_b, label_b)):
            path = Path(tmp) / name / "config.json"
            path.parent.mkdir()
            path.write_text(json.dumps(cfg))
            sides.append(side_of(label, analyze(str(path), options), cfg))
    a, b = sides
    d = PlanDiff(a=a, b=b, keys=compare.key_diff(cfg_a, cfg_b), planned=bool(a.memory or b.memory or a.max_batch))
    d.stop_fitting, d.start_fitting = flips(a, b)
    return d


def flips(a: Side, b: Side) -> tuple[list[CardFlip], list[CardFlip]]:
    """(stop, start): card and mode where batch 1 fitted at A and not at B, and the other way round."""
    stop, start = [], []
    for card in a.max_batch:
        for mode, before in a.max_batch[card].items():
            after = b.max_batch.get(card, {}).get(mode)
            if after is None:
                continue
            if before >= 1 and after == 0:
                stop.append(CardFlip(card=card, mode=mode, before=before, after=after))
            elif before == 0 and after >= 1:
                start.append(CardFlip(card=card, mode=mode, before=before, after=after))
    return stop, start


# --------------------------------------------------------------------------- rendering


def _gib(n: int | None) -> str:
    if n is None:
        return "—"
    if n < 1024**3:
        return f"{n / 1024**2:,.1f} MiB"
    return f"{n / 1024**3:,.2f} GiB"


def _num(n: int | None) -> str:
    return "—" if n is None else f"{n:,}"


def _delta(a: int | float | None, b: int | float | None, fmt=_num) -> str:
    if a is None or b is None:
        return ""
    if a == b:
        return "same"
    d = b - a
    pct = f" ({100 * d / a:+.1f} %)".replace("-", "−") if a else ""
    sign = "+" if d > 0 else "−"
    return f"{sign}{fmt(abs(d))}{pct}"


def _money(x: float) -> str:
    return f"${x:,.2f}" if x >= 1 else f"${x:.4f}"


def _hours(h: float) -> str:
    return f"{h:,.2f} h" if h >= 1 else f"{h * 60:.1f} min"


def _usd(x: float | None, h: float | None) -> str:
    if x is None:
        return "—"
    return _money(x) + (f" ({_hours(h)})" if h is not None else "")


def rows(d: PlanDiff) -> list[tuple[str, str, str, str]]:
    """(what, A, B, change) rows of the side-by-side table."""
    a, b = d.a, d.b
    out = [("Model class", a.model_class or "—", b.model_class or "—", "same" if a.model_class == b.model_class else "differs")]
    out.append(("Parameters", _num(a.parameters), _num(b.parameters), _delta(a.parameters, b.parameters)))
    if a.checkpoint is not None or b.checkpoint is not None:
        out.append(("Published checkpoint (scalars)", _num(a.checkpoint), _num(b.checkpoint), _delta(a.checkpoint, b.checkpoint)))
    out.append(("Layer-table rows", _num(a.layers), _num(b.layers), _delta(a.layers, b.layers)))
    for mode in MODES:
        if mode in a.memory or mode in b.memory:
            ma, mb = a.memory.get(mode), b.memory.get(mode)
            out.append(
                (
                    f"GPU memory, {MODE_TITLE[mode]} (batch {a.batch})",
                    _gib(ma) if ma is not None else a.memory_errors.get(mode, "—")[:40],
                    _gib(mb) if mb is not None else b.memory_errors.get(mode, "—")[:40],
                    _delta(ma, mb, _gib),
                )
            )
    if a.cost_usd is not None or b.cost_usd is not None:
        out.append(
            (
                f"Run cost on {a.cost_card or b.cost_card}",
                _usd(a.cost_usd, a.cost_hours),
                _usd(b.cost_usd, b.cost_hours),
                "" if a.cost_usd is None or b.cost_usd is None else ("same" if a.cost_usd == b.cost_usd else f"{'+' if b.cost_usd > a.cost_usd else '−'}{_money(abs(b.cost_usd - a.cost_usd))}"),
            )
        )
    if a.cheapest_card or b.cheapest_card:

        def cheap(s: Side) -> str:
            return f"{_usd(s.cheapest_usd, s.cheapest_hours)} on {s.cheapest_card}" if s.cheapest_card else "—"

        out.append(
            (
                "Cheapest run",
                cheap(a),
                cheap(b),
                ""
                if a.cheapest_usd is None or b.cheapest_usd is None or a.cheapest_card != b.cheapest_card
                else ("same" if a.cheapest_usd == b.cheapest_usd else f"{'+' if b.cheapest_usd > a.cheapest_usd else '−'}{_money(abs(b.cheapest_usd - a.cheapest_usd))}"),
            )
        )
    return out


def markdown(d: PlanDiff) -> str:
    a, b = d.a, d.b
    out = [f"### neurarch: `{a.spec}` → `{b.spec}`", ""]
    if d.keys:
        out.append(
            f"**Config:** {len(d.keys)} key{'s' * (len(d.keys) != 1)} differ: "
            + "; ".join(compare.describe_key(k) for k in d.keys[:12])
            + (f"; and {len(d.keys) - 12} more" if len(d.keys) > 12 else "")
            + "."
        )
    else:
        out.append("**Config:** no key differs.")
    out += ["", "| | A | B | Change |", "|---|--:|--:|--:|"]
    out += [f"| {w} | {x} | {y} | {z} |" for w, x, y, z in rows(d)]
    if d.planned:
        modes = [m for m in MODES if any(m in v for v in a.max_batch.values()) or any(m in v for v in b.max_batch.values())]
        if modes:
            out += ["", "**Largest batch per card** (A → B)", "", "| Card | " + " | ".join(MODE_TITLE[m] for m in modes) + " |", "|---|" + "--:|" * len(modes)]
            for card in list(dict.fromkeys([*a.max_batch, *b.max_batch])):
                cells = []
                for m in modes:
                    x, y = a.max_batch.get(card, {}).get(m), b.max_batch.get(card, {}).get(m)
                    cells.append(f"{_num(x)} → {_num(y)}" if x != y else _num(x))
                out.append(f"| {card} | " + " | ".join(cells) + " |")
        out.append("")
        if d.stop_fitting:
            out.append("**Stops fitting** (batch 1 no longer fits): " + ", ".join(f"{f.card} {MODE_TITLE.get(f.mode, f.mode)}" for f in d.stop_fitting) + ".")
        if d.start_fitting:
            out.append("**Starts fitting** (batch 1 now fits): " + ", ".join(f"{f.card} {MODE_TITLE.get(f.mode, f.mode)}" for f in d.start_fitting) + ".")
        if not d.stop_fitting and not d.start_fitting:
            out.append("No card stops or starts fitting batch 1.")
        seq = f", {a.seq_len} tokens" if a.seq_len else ""
        out += [
            "",
            f"<sub>Memory simulated on fake tensors at batch {a.batch}{seq} (the peak a CUDA card needs); largest batch with the plan's headroom; "
            "cost is the roofline estimate of `neurarch-trace --plan`.</sub>",
        ]
    else:
        out += ["", "<sub>Add `--plan` for memory per mode, the largest batch per card and the cost at both sides.</sub>"]
    return "\n".join(out) + "\n"


def text(d: PlanDiff) -> str:
    table = rows(d)
    w = [max(len(r[i]) for r in table + [("", "A", "B", "change")]) for i in range(4)]
    out = [f"A: {d.a.spec}", f"B: {d.b.spec}"]
    if d.keys:
        out.append("config: " + "; ".join(compare.describe_key(k).replace("`", "") for k in d.keys))
    else:
        out.append("config: no key differs")
    out.append("")
    out.append(f"{'':<{w[0]}}  {'A':>{w[1]}}  {'B':>{w[2]}}  change")
    out += [f"{x:<{w[0]}}  {y:>{w[1]}}  {z:>{w[2]}}  {c}" for x, y, z, c in table]
    if d.planned:
        for card in list(dict.fromkeys([*d.a.max_batch, *d.b.max_batch])):
            cells = []
            for m in MODES:
                x, y = d.a.max_batch.get(card, {}).get(m), d.b.max_batch.get(card, {}).get(m)
                if x is not None or y is not None:
                    cells.append(f"{m} {_num(x)}" + (f"->{_num(y)}" if x != y else ""))
            out.append(f"largest batch on {card}: " + ", ".join(cells))
        for f in d.stop_fitting:
            out.append(f"stops fitting: {f.card} {f.mode}")
        for f in d.start_fitting:
            out.append(f"starts fitting: {f.card} {f.mode}")
    return "\n".join(out)


def render(d: PlanDiff, fmt: str) -> str:
    if fmt == "json":
        return d.model_dump_json(indent=2)
    return markdown(d) if fmt == "markdown" else text(d)


__all__ = ["PlanDiff", "Side", "CardFlip", "diff", "diff_configs", "flips", "render", "markdown", "text"]
