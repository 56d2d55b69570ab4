"""What touches the output after the head.

Both rules need to know what the output *is*: a final LayerNorm is standard
on a backbone's features (DINOv2, BERT) and wrong after the Linear that makes
class logits.  :func:`~neurarch.verify.graph.detect_output` decides.
"""

from __future__ import annotations

from ..context import CheckContext
from ..graph import LOGIT_KINDS, is_norm, width
from ..registry import Hit, rule

_KIND_WORDS = {"classification": "classification logits", "lm": "language-model logits", "seq2seq-lm": "language-model logits"}


def _only_logits(ctx: CheckContext):
    out = ctx.output
    if out.kind not in LOGIT_KINDS:
        return f"the model outputs {out.kind} ({out.reason})"
    if out.head is None:
        return "no head row in the layer table"
    return None


@rule(
    "norm-at-output",
    severity="warn",
    summary="A normalization layer comes after the head that produces class or token logits.",
    applies=_only_logits,
)
def norm_at_output(ctx: CheckContext):
    out = ctx.output
    norms = [n for n in out.tail if is_norm(n)]
    if not norms:
        return
    norm = norms[-1]
    what = _KIND_WORDS[out.kind]
    batch_note = (
        " BatchNorm also makes each sample's logits depend on the rest of the batch, and on running statistics at eval." if "Batch" in norm.type or "Batch" in (norm.module_class or "") else ""
    )
    yield Hit(
        node=norm.name,
        message=(
            f"{norm.type} `{norm.name}` is applied after the head `{out.head.name}` ({out.head.type}, width {width(out.head)}), "
            f"so the model's output — {what} ({out.reason}) — is normalized: every sample's logit vector is rescaled to the "
            f"same spread, and the model cannot express more or less confidence through the scale of its logits, which "
            f"softmax cross-entropy relies on.{batch_note}"
        ),
        fix=f"Normalize before the head (… -> {norm.type} -> {out.head.type} -> loss) and let the final {out.head.type} output raw logits.",
    )


# Activations that change what the loss sees.  Tanh is left out on purpose:
# Gemma 2's final logit soft-capping (tanh(x / 30) * 30) is a deliberate tanh
# after the head.  LogSoftmax is left out: LogSoftmax + NLLLoss is correct,
# and log_softmax is idempotent under CrossEntropyLoss.
_BAD_ACTIVATIONS = {
    "Softmax": (
        "CrossEntropyLoss (and every transformers loss) applies log-softmax itself, so the loss sees softmax twice: "
        "the logits it gets lie in [0, 1], the predicted distribution can never be sharper than e^1 : 1, and the gradients shrink",
        "Remove the Softmax from the model and apply it only at inference, when you need probabilities.",
    ),
    "Sigmoid": (
        "with BCELoss this is the numerically weak form of BCEWithLogitsLoss (log(sigmoid) saturates), and with BCEWithLogitsLoss it is a second sigmoid",
        "Return raw logits and use BCEWithLogitsLoss; apply sigmoid only at inference.",
    ),
    "ReLU": (
        "logits can never go below 0, so the model cannot push a wrong class below the others' floor, and a class whose pre-activation turns negative gets no gradient at all",
        "Remove the activation after the head; logits must be free to be negative.",
    ),
}
_BAD_ACTIVATIONS["ReLU6"] = _BAD_ACTIVATIONS["ReLU"]


@rule(
    "activation-at-output",
    severity="warn",
    summary="Softmax, Sigmoid or ReLU after the head that produces logits (the loss applies its own).",
    applies=_only_logits,
)
def activation_at_output(ctx: CheckContext):
    out = ctx.output
    for node in out.tail:
        spec = _BAD_ACTIVATIONS.get(node.type)
        if spec is None:
            continue
        why, fix = spec
        yield Hit(
            node=node.name,
            message=f"{node.type} `{node.name}` follows the head `{out.head.name}` that produces {_KIND_WORDS[out.kind]} ({out.reason}): {why}.",
            fix=fix,
        )
        return
