"""The tokenizer against the model's input embedding (a local model folder's tokenizer files, read as JSON)."""

from __future__ import annotations

from ..context import CheckContext
from ..registry import Hit, rule


def _embedding(ctx: CheckContext):
    """``(name, rows)`` of the input embedding transformers reports, or None."""
    get = getattr(ctx.model, "get_input_embeddings", None)
    if get is None:
        return None
    try:
        emb = get()
    except Exception:  # noqa: BLE001 - a model without the method's backing attribute: nothing to compare
        return None
    rows = getattr(emb, "num_embeddings", None)
    if not isinstance(rows, int):
        return None
    name = ctx.name_of(emb) or "the input embedding"
    return name, rows


def _applies(ctx: CheckContext):
    if ctx.tokenizer is None:
        return "no tokenizer files were read (a local model folder with tokenizer.json or tokenizer_config.json)"
    if not ctx.tokenizer.size:
        return "the tokenizer files list no token ids"
    return None if _embedding(ctx) is not None else "the model has no input embedding transformers can name"


@rule(
    "tokenizer-outgrows-embedding",
    severity="error",
    summary="The tokenizer has more ids than the input embedding has rows: those tokens index past it.",
    applies=_applies,
    requires=None,
)
def tokenizer_outgrows_embedding(ctx: CheckContext):
    tok = ctx.tokenizer
    name, rows = _embedding(ctx)
    if tok.size <= rows:
        return
    beyond = sorted((i, t) for t, (i, _) in tok.added.items() if i >= rows)
    shown = ", ".join(f"`{t}` ({i})" for i, t in beyond[:4]) + (" …" if len(beyond) > 4 else "")
    yield Hit(
        node=name,
        message=(
            f"The tokenizer has {tok.size:,} ids ({tok.source}) but `{name}` has {rows:,} rows: ids {rows:,}..{tok.size - 1:,} "
            f"index past the embedding" + (f" (added tokens {shown})" if beyond else "") + ". Any text with them fails with an index error on the CPU and a device-side assert on CUDA."
        ),
        fix=(
            "Resize the embeddings to the tokenizer before training (model.resize_token_embeddings(len(tokenizer)), "
            "optionally pad_to_multiple_of=64) and save the model with them, or remove the added tokens the model was not trained with."
        ),
    )
