"""Where activation memory goes.

Both rules read :attr:`CheckContext.activations`: bytes per layer-table row
from the memory plan when the pipeline passes one, else a proxy — every
row's output tensor at the traced batch — which the message names.
"""

from __future__ import annotations

from ..context import CheckContext
from ..graph import LM_KINDS, elements, fmt_bytes
from ..registry import Hit, rule

LOGITS_MIN_SHARE = 0.10
HOTSPOT_MIN_SHARE = 0.25
HOTSPOT_MIN_ROWS = 8


def _lm_only(ctx: CheckContext):
    out = ctx.output
    if out.kind not in LM_KINDS:
        return f"the model outputs {out.kind}, not token logits"
    return None if out.head is not None and out.head.output_shape else "no head row with a shape"


def _training_lm(ctx: CheckContext):
    return _lm_only(ctx) if ctx.training else "only when training"


@rule(
    "logits-memory",
    severity="info",
    summary=f"LM logits are a large share (>= {LOGITS_MIN_SHARE:.0%}) of activation memory: compute the loss in chunks.",
    applies=_training_lm,
)
def logits_memory(ctx: CheckContext):
    head = ctx.output.head
    prof = ctx.activations
    total = prof.total
    logits = prof.bytes_by_row.get(head.name, 0)
    if not total or not logits:
        return
    share = logits / total
    if share < LOGITS_MIN_SHARE:
        return
    n = ctx.batch * elements(head)
    fp32 = n * 4
    shape = " x ".join(str(d) for d in [ctx.batch, *head.output_shape])
    yield Hit(
        node=head.name,
        message=(
            f"The LM head `{head.name}` writes {shape} = {n:,} logits per step: {fmt_bytes(fp32)} in fp32 (transformers "
            f"upcasts logits to fp32 for the loss) and as much again for their gradient. That is {share:.0%} of the "
            f"activations ({prof.source}); with gradient checkpointing on, the logits are usually the largest tensor left."
        ),
        fix=(
            "Never materialise the full logits: use a fused linear + cross-entropy that works in chunks (Liger Kernel's "
            "LigerFusedLinearCrossEntropyLoss, Apple's Cut Cross-Entropy), or compute the loss over sequence chunks; "
            "at inference, pass logits_to_keep=1."
        ),
    )


@rule(
    "activation-hotspot",
    severity="info",
    summary=f"One layer holds >= {HOTSPOT_MIN_SHARE:.0%} of activation memory: checkpoint it or shrink it.",
    applies=lambda ctx: None if ctx.training else "only when training",
)
def activation_hotspot(ctx: CheckContext):
    prof = ctx.activations
    rows = dict(prof.bytes_by_row)
    out = ctx.output
    if out.kind in LM_KINDS and out.head is not None:
        rows.pop(out.head.name, None)  # the logits have their own rule
    if len(rows) < HOTSPOT_MIN_ROWS:
        return
    total = sum(rows.values())
    if not total:
        return
    name, size = max(rows.items(), key=lambda kv: kv[1])
    share = size / total
    if share < HOTSPOT_MIN_SHARE:
        return
    node = next((n for n in ctx.nodes if n.name == name), None)
    what = f"{node.type}, output {' x '.join(map(str, node.output_shape))}" if node is not None and node.output_shape else "row"
    yield Hit(
        node=name,
        message=(f"`{name}` ({what}) holds {fmt_bytes(size)}, {share:.0%} of the activations ({prof.source}) across {len(rows)} rows: one layer decides the activation memory of the step."),
        fix=(
            "Checkpoint this layer (torch.utils.checkpoint) so its output is recomputed in backward instead of kept, "
            "or reduce its resolution or width earlier (a strided stem, fewer channels at full resolution)."
        ),
    )
