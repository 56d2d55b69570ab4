"""Formatting shared by the renderers (numbers, shapes, sentences)."""

from __future__ import annotations

from ..options import MODES  # noqa: F401  (the renderers read the mode list from here)
from ..report import Node, Params, Report


def n(x: int | None) -> str:
    return "—" if x is None else f"{x:,}"


def shape(s: list[int] | None) -> str:
    if s is None:
        return "—"
    return "[" + ", ".join(str(d) for d in s) + "]"


def pct(x: float | None) -> str:
    if x is None:
        return "—"
    if x == 0:
        return "0 %"
    return f"{x:+.4f} %" if abs(x) < 0.01 else f"{x:+.2f} %"


def rows(report: Report, max_rows: int | None) -> list[Node | None]:
    """The layer-table rows to show; None marks the elided middle."""
    nodes = report.structure.nodes
    if max_rows is None or len(nodes) <= max_rows:
        return list(nodes)
    head = max_rows // 2
    tail = max_rows - head
    return [*nodes[:head], None, *nodes[-tail:]]


def pass_line(report: Report) -> str:
    f, b = report.forward_pass, report.backward_pass
    if not f.ok:
        where = f" in {f.module}" if f.module else ""
        return f"forward pass FAILED{where}: {f.error}"
    s = "forward pass ok"
    if b is not None:
        s += ", backward pass ok" if b.ok else f", backward pass FAILED: {b.error}"
    return s


def checkpoint_sentence(p: Params) -> str:
    if p.checkpoint is None:
        return "No checkpoint was read: the published scalar count is unknown (derived is the graph's own count)."
    if p.delta == 0:
        return f"Derived matches the checkpoint exactly ({p.checkpoint:,} scalars)."
    s = f"Derived differs from the checkpoint by {p.delta:+,} scalars ({pct(p.delta_pct)})"
    if p.explained:
        return s + ", fully explained:"
    return s + ("; partly explained:" if p.differences else "; cause unknown.")


def input_line(report: Report) -> str:
    i = report.input
    if i is None:
        return "—"
    tensors = ", ".join(f"{t.name} {shape(t.shape)} {t.dtype}" for t in i.tensors)
    return f"{tensors}  ({i.how})"


def money(x: float | None) -> str:
    if x is None:
        return "—"
    return f"${x:,.2f}" if x >= 0.01 else f"${x:.4f}"


def hours(x: float | None) -> str:
    if x is None:
        return "—"
    if x < 1:
        return f"{x * 60:.1f} min"
    return f"{x:,.1f} h"


def flops(x: float | None) -> str:
    if x is None:
        return "—"
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if x >= scale:
            return f"{x / scale:,.2f} {unit}"
    return f"{x:,.0f} FLOP"


def cost_rows(report: Report) -> list[list[str]]:
    """The "What it costs to run" table: one row per card."""
    c = report.cost
    assert c is not None, "a renderer calls this only for a report with a cost section"
    out = []
    for r in c.cards:
        mark = " ".join(m for m, on in (("cheapest", r.cheapest), ("fastest", r.fastest)) if on)
        if r.step_seconds is None:
            out.append([r.name, str(r.batch) if r.batch else "—", "—", "—", "—", "—", "—", r.note or ""])
            continue
        out.append(
            [
                r.name,
                str(r.batch),
                f"{r.step_seconds * 1000:,.1f} ms",
                hours(r.run_hours),
                money(r.usd),
                f"{100 * r.mfu:.0f} %" if r.mfu is not None else "—",
                r.bound or "—",
                "; ".join(x for x in (mark, r.note or "") if x),
            ]
        )
    return out


COST_HEADER = ["card", "batch", "step", "run", "cost", "MFU", "bound", ""]


def cost_summary(report: Report) -> list[str]:
    c = report.cost
    assert c is not None, "a renderer calls this only for a report with a cost section"
    a = c.assumptions
    data = f"{a.epochs} epochs x {a.tokens:,} tokens" if a.tokens else f"{a.epochs} epochs x {a.samples:,} samples"
    if c.headline.batch == 0:
        fit = [r for r in c.cards if r.cheapest]
        alt = f"; cheapest card that fits: {fit[0].name}, {money(fit[0].usd)}" if fit else ""
        lines = [f"Batch 1 does not fit {c.headline.card}{alt} ({data}, {a.precision}, roofline estimate)."]
    elif c.headline.usd is None and c.headline.run_hours is None:
        lines = [f"No estimate on {c.headline.card} ({next((r.note for r in c.cards if r.name == c.headline.card), '')})."]
    else:
        lines = [f"Estimated one run on {c.headline.card}: {money(c.headline.usd)}, {hours(c.headline.run_hours)} at batch {c.headline.batch} ({data}, {a.precision}, roofline estimate)."]
    per = f"{flops(c.flops_per_sample)} per sample forward+backward"
    if c.flops_per_token:
        per += f", {flops(c.flops_per_token)} per token"
    lines.append(per + ".")
    lines.append(
        f"Assumes {a.compute_efficiency:.0%} of peak tensor rate and {a.bandwidth_efficiency:.0%} of bandwidth ({a.sources}); {a.launch_seconds * 1e6:.0f} us per operator; optimizer {a.optimizer}."
    )
    if c.ops_without_formula:
        lines.append(f"Ops counted as 0 FLOPs (formula failed): {', '.join(c.ops_without_formula)}.")
    return lines


# The report's sections, in the order every renderer writes them (each renderer has one function per name).
SECTIONS: tuple[str, ...] = ("header", "parameters", "layers", "memory", "cards", "multi_gpu", "cost", "verifier", "errors", "warnings")
MEMORY_HEADER = ["mode", "peak (card)", "tensors", "weights", "grads", "optimizer", "activations", "temporary", "overhead", "phase"]


def gib(x: int | None) -> str:
    return "—" if x is None else f"{x / 2**30:,.2f} GiB"


def memory_rows(report: Report) -> list[list[str]]:
    """One row per mode of the memory plan; modes that did not apply say why."""
    m = report.memory
    assert m is not None, "a renderer calls this only for a report with a memory section"
    out = []
    for mode in MODES:
        x = getattr(m, mode)
        if x is None:
            if mode in m.errors:
                out.append([mode, "not applicable" if "no linear" in m.errors[mode] or "decoder" in m.errors[mode] else "failed", m.errors[mode], *[""] * 7])
            continue
        b = x.breakdown
        phase = x.phase + (f" ({x.module})" if x.module else "")
        out.append([mode, gib(x.peak_bytes), gib(x.peak_tensor_bytes), gib(b.weights), gib(b.gradients), gib(b.optimizer), gib(b.activations), gib(b.temporary), gib(b.overhead), phase])
    return out


def memory_summary(report: Report) -> list[str]:
    m = report.memory
    assert m is not None, "a renderer calls this only for a report with a memory section"
    a = m.assumptions
    lines = []
    if a is not None:
        lora = f"LoRA rank {a.lora_rank}" + (f" on {','.join(a.lora_targets)}" if a.lora_targets else "")
        lora += f", dropout {a.lora_dropout:g}" if a.lora_dropout else ""
        lora += ", bf16 adapters" if a.adapter_dtype == "bf16" else ""
        lines.append(
            f"Batch {a.batch}, {a.precision}, optimizer {a.optimizer}, {lora}"
            + (", gradient checkpointing" if a.grad_checkpointing else "")
            + (" (reentrant)" if a.grad_checkpointing_reentrant else "")
            + (", gradients kept between steps (zero_grad(set_to_none=False))" if not a.zero_grad_set_to_none else "")
            + (f", {a.grad_accumulation} micro-batches per optimizer step" if a.grad_accumulation > 1 else "")
            + f"; a card fits when peak x {a.headroom:g} <= its memory. {a.method}."
        )
        if a.attn_implementation:
            lines.append(f"Attention: {a.attn_implementation} ({a.attn_implementation_how}).")
        if a.task:
            lines.append(f"Task: {a.task}, simulated as {a.model_class} (the checkpoint comparison keeps the published head).")
        if a.optimizer_implementation:
            lines.append(f"Optimizer: {a.optimizer_implementation}.")
    if m.lora is not None:
        lines.append(f"LoRA trains {m.lora.trainable_parameters:,} parameters.")
    if m.full is not None and m.full.first_step_peak_tensor_bytes != m.full.peak_tensor_bytes:
        lines.append(f"Full fine-tune, first step: {gib(m.full.first_step_peak_tensor_bytes)} of tensors (no optimizer state yet); the steady state above decides the fit.")
    return lines


def fit_header(report: Report) -> list[str]:
    modes = [mode for mode in MODES if report.cards and mode in report.cards[0].max_batch]
    return ["card", "memory", *[f"max batch {mode}" for mode in modes]]


def fit_rows(report: Report) -> list[list[str]]:
    modes = [mode for mode in MODES if report.cards and mode in report.cards[0].max_batch]
    return [[f.name, f"{f.memory_bytes / 2**30:,.1f} GiB" + ("" if f.memory_basis == "usable" else " (nominal)"), *(f"{f.max_batch[mode]:,}" for mode in modes)] for f in report.cards]


def multi_gpu_lines(report: Report) -> list[str]:
    """One line per plan, then each strategy's method once."""
    lines: list[str] = []
    methods: dict[str, str] = {}
    none: dict[tuple[str, str], list] = {}  # (strategy, mode) -> plans with no card count that holds batch 1
    for p in report.multi_gpu:
        if p.gpus == 0:
            none.setdefault((p.strategy, p.mode), []).append(p)
            continue
        methods.setdefault(p.strategy, p.method)
        if p.strategy == "pipeline":
            stages = " + ".join(gib(b) for b in p.stage_bytes or [])
            lines.append(f"PIPELINE on {p.gpus} x {p.card} ({p.mode}): cut after {p.cut_after}, about {stages} at batch 1.")
        else:
            lines.append(
                f"{p.strategy.upper()} on {p.gpus} x {p.card} ({p.mode}): about {gib(p.per_gpu_bytes)} per card at batch 1"
                + (f", up to batch {p.max_batch_per_gpu} per card." if p.max_batch_per_gpu else ".")
            )
    for (strategy, mode), plans in none.items():
        need = max(p.per_gpu_bytes for p in plans)
        hint = "" if report.memory is None or report.memory.assumptions is None or report.memory.assumptions.grad_checkpointing else "; --grad-checkpointing makes the activations smaller"
        lines.append(
            f"{strategy.upper()} ({mode}): no number of {', '.join(p.card for p in plans)} holds batch 1: each card "
            f"would still keep about {gib(need)} whole (activations and scratch are not sharded){hint}."
        )
    lines += [f"{strategy.upper()} is an {method}." if method.startswith("estimate") else f"{strategy.upper()}: {method}." for strategy, method in methods.items()]
    return lines
