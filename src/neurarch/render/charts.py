"""Inline SVG charts of a report, drawn server-side (no JavaScript, no assets).

* :func:`memory_charts`: one stacked bar per memory mode (weights, gradients,
  optimizer state, activations, temporaries, overhead), every mode on the same
  scale so the bars compare;
* :func:`batch_chart`: the largest batch that fits on each card, per mode
  (log2 scale: batches run from 1 to thousands).

Both are used by the ``--share`` HTML page and the web app.  Every piece of
text comes from the report and is escaped; each chart has a ``<title>`` and
an ``aria-label`` and prints its figures as text beside the shapes, so it reads
without hovering and with a screen reader.
"""

from __future__ import annotations

import math
from html import escape

from ..options import MODES
from ..report import MemoryMode, Report

MODE_LABELS = {"full": "full fine-tune", "lora": "LoRA", "qlora": "QLoRA", "inference": "inference"}
ROLES = ("weights", "gradients", "optimizer", "activations", "temporary", "overhead")
# Colour-blind-safe palette (Okabe & Ito, 2008), one colour per role / mode.
ROLE_COLORS = {
    "weights": "#0072B2",
    "gradients": "#E69F00",
    "optimizer": "#CC79A7",
    "activations": "#009E73",
    "temporary": "#56B4E9",
    "overhead": "#999999",
}
MODE_COLORS = {"full": "#0072B2", "lora": "#009E73", "qlora": "#E69F00", "inference": "#CC79A7"}
GIB = 1 << 30


def gib(nbytes: int | float) -> str:
    return f"{nbytes / GIB:,.2f} GiB"


def _svg(width: int, height: int, label: str, body: list[str], css_class: str) -> str:
    e = escape(label)
    return (
        f'<svg class="chart {css_class}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="100%" preserveAspectRatio="xMinYMin meet" role="img" aria-label="{e}" '
        f'style="max-width:{width}px;font:12px system-ui,-apple-system,Segoe UI,sans-serif">'
        f"<title>{e}</title>" + "".join(body) + "</svg>"
    )


def memory_modes(report: Report) -> list[tuple[str, MemoryMode]]:
    """``[(mode, MemoryMode)]`` for the modes the report simulated, in order."""
    mem = report.memory
    if mem is None:
        return []
    found = [(m, getattr(mem, m, None)) for m in MODES]
    return [(m, mm) for m, mm in found if isinstance(mm, MemoryMode)]


def memory_chart(mode: str, mm, scale_bytes: int, width: int = 420) -> str:
    """One mode's peak as a stacked bar of its breakdown, ``scale_bytes`` wide."""
    bd = mm.breakdown
    parts = [(r, int(getattr(bd, r, 0) or 0)) for r in ROLES]
    total = sum(v for _, v in parts) or 1
    left, bar_w, bar_h = 8, width - 16, 22
    scale = bar_w / max(scale_bytes, total, 1)
    label = f"{MODE_LABELS.get(mode, mode)}: peak {gib(mm.peak_bytes)} at batch {mm.batch}"
    body = [f'<text x="{left}" y="16" font-weight="600">{escape(label)}</text>']
    x = float(left)
    for role, v in parts:
        if v <= 0:
            continue
        w = v * scale
        body.append(
            f'<rect class="seg seg-{role}" x="{x:.2f}" y="24" width="{max(w, 0.5):.2f}" height="{bar_h}" fill="{ROLE_COLORS[role]}">'
            f"<title>{escape(role)}: {escape(gib(v))} ({100 * v / total:.1f} %)</title></rect>"
        )
        x += w
    # The figures as text, three rows of two, so the chart reads without hovering.
    for i, (role, v) in enumerate(parts):
        col, row = i % 2, i // 2
        tx, ty = left + col * (bar_w / 2), 64 + row * 18
        body.append(f'<rect x="{tx:.1f}" y="{ty - 10}" width="10" height="10" fill="{ROLE_COLORS[role]}"/>')
        body.append(f'<text x="{tx + 14:.1f}" y="{ty}">{escape(role)} {escape(gib(v))}</text>')
    return _svg(width, 64 + 3 * 18, label, body, f"memory-chart memory-{mode}")


def memory_charts(report: Report, width: int = 420) -> list[tuple[str, str]]:
    """``[(mode, svg)]``: one breakdown chart per simulated mode, on one scale."""
    modes = memory_modes(report)
    if not modes:
        return []
    scale = max(int(mm.peak_bytes) for _, mm in modes)
    return [(m, memory_chart(m, mm, scale, width)) for m, mm in modes]


def batch_chart(report: Report, width: int = 440) -> str:
    """Largest batch per card and mode (bars on a log2 scale); "" without card fits."""
    cards = [c for c in report.cards if c.max_batch]
    if not cards:
        return ""
    modes = [m for m in MODES if any(m in c.max_batch for c in cards)]
    top = max((b for c in cards for b in c.max_batch.values()), default=1)
    name_w, right = 112, 70
    bar_area = width - name_w - right
    row_h, bar_h = 6 + 13 * len(modes), 11
    legend_h = 22
    height = legend_h + row_h * len(cards) + 8
    span = math.log2(max(top, 2)) + 1  # batch 1 gets one unit, so it is visible

    def bar_len(b: int) -> float:
        return 0.0 if b <= 0 else bar_area * (math.log2(b) + 1) / span

    label = "Largest batch that fits on each card, per mode"
    body = []
    for i, m in enumerate(modes):
        lx = 8 + i * (width - 16) / max(len(modes), 1)
        body.append(f'<rect x="{lx:.1f}" y="6" width="10" height="10" fill="{MODE_COLORS[m]}"/>')
        body.append(f'<text x="{lx + 14:.1f}" y="15">{escape(MODE_LABELS[m])}</text>')
    for r, card in enumerate(cards):
        y0 = legend_h + r * row_h
        mid = y0 + row_h / 2
        body.append(f'<text class="card-name" x="{name_w - 6}" y="{mid - 1:.1f}" text-anchor="end">{escape(card.name)}</text>')
        body.append(f'<text x="{name_w - 6}" y="{mid + 12:.1f}" text-anchor="end" fill="#57606a">{card.memory_bytes / GIB:,.1f} GiB</text>')
        for i, m in enumerate(modes):
            if m not in card.max_batch:
                continue
            b = int(card.max_batch[m])
            y = y0 + 3 + i * 13
            w = bar_len(b)
            text = f"{b:,}" if b > 0 else "does not fit"
            tip = f"{card.name}, {MODE_LABELS[m]}: " + (f"largest batch {b:,}" if b > 0 else "batch 1 does not fit")
            if w > 0:
                body.append(f'<rect class="bar bar-{m}" x="{name_w}" y="{y}" width="{w:.2f}" height="{bar_h}" fill="{MODE_COLORS[m]}"><title>{escape(tip)}</title></rect>')
            body.append(f'<text class="batch batch-{m}" x="{name_w + w + 4:.2f}" y="{y + 10}" fill="{"#1b1f24" if b > 0 else "#b3261e"}">{escape(text)}</text>')
    return _svg(width, int(height), label, body, "batch-chart")
