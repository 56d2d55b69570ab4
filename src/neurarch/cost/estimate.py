"""Roofline estimate of a training run on every priced card.

Each operator's time on a card is the larger of

    FLOPs / (peak tensor rate x COMPUTE_EFFICIENCY)   and   bytes / (bandwidth x BANDWIDTH_EFFICIENCY)

plus a fixed launch overhead; a step is the sum over the forward and backward
operators plus the optimizer step (memory-bound: it streams parameters,
gradients and optimizer state).  A run is ``ceil(epochs x samples / batch)``
steps (or ``epochs x tokens / (batch x seq_len)`` for language models).

The per-op work is traced at batch 2 and batch 3; every op's FLOPs and bytes
are affine in the batch (weights are read once, activations scale), so the
work at batch B is extrapolated op by op from those two exact traces, after
checking that both ran the same op sequence.  (Batch 1 is not used: some
models take a different path there, e.g. a sum over the batch becomes a copy.)
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from torch import nn

from ..fake.tensors import ValueMode, needs_value
from ..inputs import InputOptions, InputPlan, plan_inputs
from ..options import PRECISIONS  # noqa: F401  (re-exported)
from ..plan.depth import cut, describe, stacks_of
from ..plan.train import label_specs
from ..trace.loss import loss_of
from .counter import OpCounter
from .price import (  # noqa: F401  (the pricing, torch-free, re-exported here)
    ADAMW_BYTES_PER_PARAM,
    BANDWIDTH_EFFICIENCY,
    COMPUTE_EFFICIENCY,
    FSDP_TRANSFERS,
    LAUNCH_SECONDS,
    OpRecord,
    Run,
    StepWork,
    decode_work,
    encode_work,
    estimate,
    fsdp_comm_seconds,
    runs_for,
    step_time,
)


def _count(model: nn.Module, plan: InputPlan, float_bytes: int, cfg=None) -> OpCounter:
    """One training step's ops: forward with the task's own loss (the labels the
    memory planner trains with; a model without one: its first floating output
    summed), then backward.  Plain fake tensors first; a model whose code reads
    a value (a VLM counting its image tokens) is counted under the tracer's value
    mode, as it was traced."""
    params = list(model.parameters())
    mode = getattr(params[0], "fake_mode", None) if params else None
    if mode is None:
        raise RuntimeError("count_step needs a model already moved to fake tensors (run the trace first)")
    if all(r.count is not None for t in plan.tensors for r in t.runs):
        try:
            return _count_once(model, plan, float_bytes, cfg, mode, None)
        except Exception as e:
            if not needs_value(e):
                raise
    return _count_once(model, plan, float_bytes, cfg, mode, ValueMode(mode))


def _count_once(model: nn.Module, plan: InputPlan, float_bytes: int, cfg, mode, values) -> OpCounter:
    from ..fake.gaps import FakeGaps
    from ..fake.views import fast_fake

    shapes = frozenset(tuple(p.shape) for p in model.parameters() if p.dim() == 2)
    counter = OpCounter(float_bytes=float_bytes, weight_shapes=shapes)
    gaps = FakeGaps()
    if values is None:
        gaps.fake = mode  # right below it: a cache hit answered there (neurarch.fake.hits.cached)
    try:
        # FakeGaps answers the ops whose meta kernels refuse what CUDA runs (fp32 grouped MoE matmuls).
        with fast_fake(), values.running() if values is not None else mode, gaps:
            if values is not None:
                plan.resolve(model, values)
            inputs = plan.make(values)
            labels = label_specs(model, cfg, plan)
            if labels:
                inputs.update(type(plan)(tensors=list(labels), main=labels[0].name, batch=plan.batch).make(values))
            with counter:
                out = model(**inputs)
                loss = loss_of(out)
                if loss is None:  # no floating output that needs grad first: every one, summed
                    loss = loss_of(out, every_output=True)
                del out
                if loss is not None:
                    counter.phase = "backward"
                    loss.backward()
    finally:
        for p in model.parameters():
            p.grad = None
    return counter


def _count_at_2_and_3(model: nn.Module, cfg, opts: InputOptions, float_bytes: int, default_shape) -> tuple[OpCounter, OpCounter]:
    works = []
    for b in (2, 3):
        o = dataclasses.replace(opts, batch=b)
        works.append(_count(model, plan_inputs(model, cfg, o, default_shape), float_bytes, cfg))
    c1, c2 = works
    if [r.op for r in c1.records] != [r.op for r in c2.records]:
        raise RuntimeError("the model runs different ops at batch 2 and 3; cannot extrapolate")
    return c1, c2


def count_step(model: nn.Module, cfg, opts: InputOptions, precision: str, default_shape=None, *, cut_depth: bool = True, cache: bool = False) -> StepWork:
    """Trace one training step's ops at batch 2 and 3 (a deep model cut to 2 and 3
    repeats of its layer stack, see :class:`StepWork`).  ``cache``: read and write
    the count in the simulation cache on disk (:mod:`neurarch.plan.cache`)."""
    from ..plan import cache as _cache

    float_bytes = 4 if precision == "fp32" else 2
    k = _cache.key("cost", model, cfg, opts, float_bytes, default_shape, cut_depth) if cache and _cache.enabled() else None
    return _cache.cached(k, lambda: _count_step(model, cfg, opts, float_bytes, default_shape, cut_depth), encode_work, decode_work)


def _count_step(model: nn.Module, cfg, opts: InputOptions, float_bytes: int, default_shape, cut_depth: bool) -> StepWork:
    # Every layer list that repeats as many times as the largest (an encoder and its decoder, CLIP's two
    # towers) is cut together, as the memory planner cuts them: each op's work is affine in that one number.
    stacks = stacks_of(model) if cut_depth else ()
    if stacks and stacks[0].units > 3:
        try:
            runs = []
            for units in (2, 3):
                with cut(model, stacks, units):
                    runs.append(_count_at_2_and_3(model, cfg, opts, float_bytes, default_shape))
            (a1, a2), (b1, b2) = runs
            # The 3-repeat run must make every op of the 2-repeat run, and one repeat's more.
            extra = Counter(r.op for r in b1.records)
            extra.subtract(Counter(r.op for r in a1.records))
            if min(extra.values(), default=0) < 0 or sum(extra.values()) <= 0:
                raise RuntimeError("the cut runs do not line up")
            n = stacks[0].units
            if len(stacks) == 1:
                stack = stacks[0]
                method = f"traced with the layer stack {stack.describe()} cut to {stack.depth(2)} and {stack.depth(3)} layers, extrapolated to {stack.length}"
            else:
                method = f"traced with the layer stacks {describe(stacks)} each cut to 2 and 3 repeats together, extrapolated to {n}"
            return StepWork(
                a1.records + b1.records,
                a2.records + b2.records,
                a1.unknown_matmul_like | b1.unknown_matmul_like,
                weights=[3.0 - n] * len(a1.records) + [n - 2.0] * len(b1.records),
                method=method,
            )
        except Exception:  # the cut model does not run: count it whole
            pass
    c1, c2 = _count_at_2_and_3(model, cfg, opts, float_bytes, default_shape)
    return StepWork(c1.records, c2.records, c1.unknown_matmul_like | c2.unknown_matmul_like)
