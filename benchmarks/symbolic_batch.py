"""Can one fake training step with a symbolic batch stand for every batch?  A probe, not a plan.

    python benchmarks/symbolic_batch.py                 # tiny Llama, gpt2, BERT, Swin
    python benchmarks/symbolic_batch.py --batches 3,7 --loss model

A plan simulates each memory mode at batch 1, 2 (and 3) and then at each card's
largest batch, because FakeTensorMode runs one batch at a time.  torch's fake
tensors also take symbolic sizes (a ``ShapeEnv``, as ``torch.compile`` uses
them): with the batch a symbol ``s``, every tensor's size is an expression in
``s``, computed by the same meta kernels.  For each tiny model this runs one
forward and backward pass with a symbolic batch and, for each of ``--batches``,
one with that batch as a number, all under plain ``FakeTensorMode``, recording
every op's output shapes.  It prints whether the symbolic pass ran, how many
guards it added (a guard is the model's code branching on the batch: where
there is one, the symbolic pass holds only for the batches it allows), the
first guard's source line, whether the symbolic shapes evaluated at each batch
equal that batch's own shapes op for op, and the seconds of each pass.

``--loss model`` trains on the model's own loss (labels given), ``sum`` (the
default) on the sum of its first output: transformers' causal-LM loss pads the
labels, which specializes the batch today.  Nothing in neurarch uses this yet.
"""

from __future__ import annotations

import argparse
import platform
import time

MODELS = {
    "llama": dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=1000),
    "gpt2": dict(model_type="gpt2", n_embd=64, n_layer=2, n_head=4, vocab_size=1000, bos_token_id=0, eos_token_id=0),
    "bert": dict(model_type="bert", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=1000),
    "swin": dict(model_type="swin", embed_dim=16, depths=[2, 2], num_heads=[2, 4], image_size=64, patch_size=4, window_size=4),
}
SEQ = 32


def _inputs(kind: str, batch, torch, labels: bool) -> dict:
    if kind == "swin":
        out = {"pixel_values": torch.zeros(batch, 3, 64, 64)}
        if labels:
            out["labels"] = torch.zeros(batch, dtype=torch.long)
        return out
    ids = torch.zeros(batch, SEQ, dtype=torch.long)
    return {"input_ids": ids, **({"labels": torch.zeros(batch, SEQ, dtype=torch.long)} if labels else {})}


def _pass(kind: str, batch: int, symbolic: bool, loss: str):
    """(every op's output shapes, the shape environment, the batch's symbol or None, seconds) of one forward + backward."""
    import torch
    import transformers
    from torch._dynamo.source import ConstantSource
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    shapes: list[tuple] = []

    class Shapes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            shapes.append((str(func), tuple(tuple(t.shape) for t in tree_leaves(out) if isinstance(t, torch.Tensor))))
            return out

    env = ShapeEnv()
    cfg = transformers.AutoConfig.for_model(**MODELS[kind])
    cls = transformers.AutoModelForImageClassification if kind == "swin" else transformers.AutoModelForMaskedLM if kind == "bert" else transformers.AutoModelForCausalLM
    with FakeTensorMode(shape_env=env, allow_non_fake_inputs=True):
        model = cls.from_config(cfg)
        model.train()
        b, symbol = batch, None
        if symbolic:
            symbol = env.create_symbol(batch, ConstantSource("batch"), dynamic_dim=DimDynamic.DYNAMIC)
            b = env.create_symintnode(symbol, hint=batch)
        inputs = _inputs(kind, b, torch, loss == "model")
        t = time.perf_counter()
        with Shapes():
            out = model(**inputs)
            value = out.loss if loss == "model" else next(v for v in out.values() if isinstance(v, torch.Tensor)).float().sum()
            value.backward()
        seconds = time.perf_counter() - t
    return shapes, env, symbol, seconds


def _evaluate(shapes: list[tuple], symbol, batch: int) -> list[tuple]:
    """The symbolic shapes with the batch's symbol set to ``batch`` (a size that is a plain number stays)."""

    def one(d):
        node = getattr(d, "node", None)
        return int(d) if node is None else int(node.expr.subs({symbol: batch}))

    return [(op, tuple(tuple(one(d) for d in shape) for shape in outs)) for op, outs in shapes]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", choices=[[], *MODELS], default=[], help=f"tiny models to probe (default: all of {', '.join(MODELS)})")
    ap.add_argument("--batches", default="4,7", help="batches to compare with, comma-separated (default 4,7)")
    ap.add_argument("--loss", choices=("sum", "model"), default="sum", help="what backward starts from (default: the sum of the first output)")
    a = ap.parse_args()
    batches = [int(x) for x in a.batches.split(",")]
    if any(b < 2 for b in batches):
        ap.error("--batches must be 2 or more (1 is a size-1 dimension torch treats apart)")
    import torch

    print(f"machine: {platform.machine()}, python {platform.python_version()}, torch {torch.__version__}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"loss: {a.loss}; symbolic pass with hint {batches[0]}\n")
    print("| model | symbolic pass | guards | first guard | ops (numeric) | the same ops and shapes at " + ", ".join(map(str, batches)) + " | first difference | symbolic s | numeric s (each batch) |")
    print("|---|---|---:|---|---:|---|---|---:|---|")
    for kind in a.models or list(MODELS):
        try:
            sym, env, symbol, sym_s = _pass(kind, batches[0], True, a.loss)
        except Exception as e:  # noqa: BLE001 - a failure is the finding
            print(f"| {kind} | failed: {type(e).__name__}: {str(e).strip().splitlines()[0][:100] if str(e).strip() else ''} | | | | | | | |")
            continue
        equal, numeric, diffs, counts = [], [], [], []
        for b in batches:
            real, _, _, s = _pass(kind, b, False, a.loss)
            numeric.append(s)
            counts.append(str(len(real)))
            got = _evaluate(sym, symbol, b)
            equal.append("yes" if got == real else "NO")
            if got != real and not diffs:
                i = next((k for k, (x, y) in enumerate(zip(got, real)) if x != y), min(len(got), len(real)))
                diffs.append(
                    f"op {i} at {b}: symbolic {got[i][0] if i < len(got) else 'none'} {list(got[i][1]) if i < len(got) else ''}, numeric {real[i][0] if i < len(real) else 'none'} {list(real[i][1]) if i < len(real) else ''}"
                )
        first = str(env.guards[0].expr) if env.guards else "-"
        print(
            f"| {kind} | ran | {len(env.guards)} | {first} | {len(sym)} ({', '.join(counts)}) | {', '.join(equal)} | {diffs[0] if diffs else '-'} | {sym_s:.2f} | {', '.join(f'{s:.2f}' for s in numeric)} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
