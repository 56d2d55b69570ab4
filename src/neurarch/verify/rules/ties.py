"""The config's head against the head transformers built: a tie the config does not ask for.

transformers 5.x builds every T5 model (T5 v1.1, mT5, flan-t5, T0 ...) with the
LM head sharing the input embedding, whatever the config file says
(``T5Config`` sets ``tie_word_embeddings = True`` after reading it).  Those
checkpoints were saved with ``tie_word_embeddings: false`` and a head of their
own, so the built model is one embedding matrix short of them, and so is every
figure counted from it.  The rule reads the config file as published (the
source's dict), not the config object the library rewrote.
"""

from __future__ import annotations

from ..context import CheckContext
from ..registry import Hit, rule


def _heads(ctx: CheckContext):
    """``(input name, input module, output name, output module)`` transformers reports, or None."""
    try:
        emb_in = ctx.model.get_input_embeddings()  # type: ignore[operator]
        emb_out = ctx.model.get_output_embeddings()  # type: ignore[operator]
    except Exception:  # noqa: BLE001 - a model without the methods (or their attributes): nothing to compare
        return None
    if emb_in is None or emb_out is None or getattr(emb_in, "weight", None) is None or getattr(emb_out, "weight", None) is None:
        return None
    return ctx.name_of(emb_in) or "the input embedding", emb_in, ctx.name_of(emb_out) or "the output head", emb_out


def _applies(ctx: CheckContext):
    raw = ctx.source_config
    if not isinstance(raw, dict):
        return "no config file was read"
    if raw.get("tie_word_embeddings", None) is not False:
        return "the config file does not set tie_word_embeddings to false"
    return None if _heads(ctx) is not None else "the model has no input and output embeddings transformers can name"


@rule(
    "untied-head-built-tied",
    severity="warn",
    summary="The config file asks for a separate output head (tie_word_embeddings false) but the model was built with it tied.",
    applies=_applies,
    requires=None,
)
def untied_head_built_tied(ctx: CheckContext):
    name_in, emb_in, name_out, emb_out = _heads(ctx)
    if emb_out.weight is not emb_in.weight:
        return
    w = emb_out.weight
    n = w.numel()
    shape = " x ".join(f"{d:,}" for d in w.shape)
    built = ctx.report.model.library or "the installed library"
    params = ctx.report.params
    here = f" ({params.parameters:,} here)" if params is not None and params.parameters else ""
    whole = f" ({params.parameters + n:,} in all)" if here and params is not None else ""
    matches = ""
    if params is not None and params.checkpoint is not None and params.checkpoint == params.derived + n:
        matches = f" The published checkpoint's {params.checkpoint:,} scalars are that layout's."
    yield Hit(
        node=name_out,
        message=(
            f"The config file sets tie_word_embeddings to false, but {built} builds {ctx.model_class} with "
            f"`{name_out}.weight` and `{name_in}.weight` as one tensor ({shape} = {n:,} parameters). The parameter "
            f"count{here} and every memory figure are for the tied model this library builds; a checkpoint saved "
            f"with the config's separate head holds {n:,} more parameters{whole}, and in training their gradients and "
            f"optimizer state, which this report does not count.{matches}"
        ),
        fix=(
            f"If you will train the checkpoint's layout, add its separate head to these figures: {n:,} parameters of "
            "weights in every mode, and their gradients and optimizer state in full fine-tuning (LoRA and QLoRA leave "
            f"it frozen unless it is a target). The tied figures are right for the model {built} builds from this config."
        ),
    )
