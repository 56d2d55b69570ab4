"""Inference: prefill at the input shape; for decoders, the KV cache at a context
length and one decode step on it (the weights in the compute dtype)."""

from __future__ import annotations

from typing import Any, Iterable

import torch
from torch import nn
from torch.utils._python_dispatch import _disable_current_modes

from ..build import BuiltModel
from ..fake.convert import meta_copy
from ..inputs import InputPlan
from ..introspect import forward_params as _decoder_accepts
from ..introspect import max_positions as _max_positions
from .overhead import cuda_round
from .simulation import Simulation, _count, _peak_of, _replay, _run, _Watch, _with_values
from .tracker import INPUT, LiveTracker
from .train import TrainSetup, autocast_for, make_batch, prepare

# --------------------------------------------------------------------------
# Inference: prefill at the input shape, KV cache at a context length
# --------------------------------------------------------------------------


def _reachable_tensors(obj, seen: set[int] | None = None, depth: int = 0) -> list[torch.Tensor]:
    """Tensors held by a cache object (DynamicCache layers, tuples of tuples ...)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 6:
        return []
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return [obj]
    out: list[torch.Tensor] = []
    items: Iterable[Any]
    if isinstance(obj, dict):
        items = obj.values()
    elif isinstance(obj, (list, tuple)):
        items = obj
    elif hasattr(obj, "__dict__") and not isinstance(obj, (nn.Module, type)):
        items = vars(obj).values()
    else:
        return out
    for v in items:
        out.extend(_reachable_tensors(v, seen, depth + 1))
    return out


def _storage_sum(tensors: list[torch.Tensor]) -> int:
    seen: dict[int, int] = {}
    for t in tensors:
        st = t.untyped_storage()
        seen[id(st)] = st.nbytes()
    return sum(seen.values())


def _learned_positions(model: nn.Module, limit: int) -> bool:
    """Whether the model looks positions up in a learned table of ``limit`` rows
    (``wpe``, ``embed_positions`` ...: OPT's has two more), not rotary or relative ones."""
    for name, mod in model.named_modules():
        leaf = name.rsplit(".", 1)[-1].lower()
        if isinstance(mod, nn.Embedding) and ("pos" in leaf or leaf == "wpe") and limit <= mod.num_embeddings <= limit + 2:
            return True
    return False


def _cache_of(out):
    for name in ("cache", "past_key_values"):
        c = getattr(out, name, None)
        if c is not None:
            return c
    return None


def simulate_inference(built: BuiltModel, plan: InputPlan, setup: TrainSetup, *, context_len: int | None = None, record_ops: bool = False) -> Simulation:
    """Prefill at the input shape; for decoders, then the KV cache at ``context_len``
    tokens and one decode step on it.  Weights are held in the compute dtype."""
    return _with_values(built, lambda values: _simulate_inference(built, plan, setup, context_len, record_ops, values))


def _simulate_inference(built: BuiltModel, plan: InputPlan, setup: TrainSetup, context_len: int | None, record_ops: bool, values: bool) -> Simulation:
    model = prepare(meta_copy(built.model), setup)
    accepts = _decoder_accepts(model)
    # transformers 5 calls the cache argument ``cache``; 4.x called it ``past_key_values``.
    cache_arg = "cache" if "cache" in accepts else "past_key_values"
    decoder = cache_arg in accepts and plan.main == "input_ids" and not getattr(built.config, "is_encoder_decoder", False)
    ctx = context_len or plan.seq_len
    limit = _max_positions(built.config)
    if decoder and ctx and limit and ctx >= limit and _learned_positions(built.model, limit):
        # A table of learned positions (GPT-2, GPT-Neo): a full context leaves the decoded
        # token no position, so generation's cache holds one token less.
        ctx = limit - 1
    extra: dict[str, Any] = {"use_cache": True} if decoder else {}  # keyword switches for the forward call
    if decoder and "logits_to_keep" in accepts:
        extra["logits_to_keep"] = 1  # generate() keeps the last position's logits only
    info: dict[str, int] = {}

    def body(tracker: LiveTracker, watch: _Watch) -> None:
        batch = make_batch(plan, [], setup, real=False, values=watch.values)
        batch.update(extra)  # generation's own switches win over the planner's (use_cache)
        for t in batch.values():
            if isinstance(t, torch.Tensor):
                tracker.register(t, INPUT)
        with torch.no_grad(), autocast_for(setup, "cpu"):
            with watch.phase(1, "prefill"):
                out = model(**batch)
            if not decoder:
                return
            cache = _cache_of(out)
            del out

            def token_ids(shape):
                if watch.values is None:
                    return torch.randint(0, 2, shape)
                # Under the value mode the ids are real (code may count special tokens in them).
                with _disable_current_modes():
                    real = torch.randint(0, 2, shape)
                ids = watch.values.real(real)
                tracker.register(ids, INPUT)
                return ids

            if ctx and plan.seq_len and ctx != plan.seq_len:
                del cache
                long = {"input_ids": token_ids((plan.batch, ctx))}
                with watch.phase(2, "prefill"):
                    cache = _cache_of(model(**long, **extra))
            info["kv"] = _storage_sum(_reachable_tensors(cache)) if cache is not None else 0
            step_ids = token_ids((plan.batch, 1))
            with watch.phase(3, "decode"):
                out = model(input_ids=step_ids, **{cache_arg: cache}, **extra)
            del out

    tracker, watch = _run(model, setup, body, plan, record_ops, values)
    lives = tracker.lives
    peak = _peak_of(lives, 0, tracker.events)
    # The prefill at context_len only builds the cache; what generation needs is
    # the prefill at the input shape and the decode step on the full cache.
    marks = {(s, ph): ev for ev, s, ph in watch.phase_starts}
    parts = [(1, "prefill"), (3, "decode")]
    windows = tuple((marks[(s, ph)], marks.get((s, f"end-{ph}"), tracker.events)) for s, ph in parts if (s, ph) in marks)
    peaks = [_peak_of(lives, lo, hi) for lo, hi in windows]
    best = max(peaks, key=lambda p: p.bytes) if peaks else peak
    sim = Simulation(setup, 1, best, [best], 0, _count(model), lives)
    windows = windows or ((0, tracker.events),)
    sim.rounded_bytes = max(_replay(lives, lo, hi, cuda_round)[0] for lo, hi in windows)
    sim.windows = (windows, windows)
    sim.kv_cache_bytes = info.get("kv")
    sim.context_len = ctx if decoder else None
    sim.ops = tracker.ops
    return sim
