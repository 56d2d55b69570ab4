"""Parameter and buffer counts, and their comparison with a published checkpoint.

* ``parameters``: unique parameter tensors (tied weights once);
* ``buffers``: persistent buffers a checkpoint stores (BatchNorm running
  statistics...), step counters (``num_batches_tracked``) kept apart;
* ``derived`` = parameters + buffers: what the graph says a checkpoint holds;
* ``checkpoint``: scalars in the real checkpoint (header or published record),
  never computed from this graph.

When they differ we explain the difference only where the explanation adds up
exactly: tensor by tensor when a header was read, or by matching the delta
against known causes when only a recorded total exists.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from torch import nn

from ..report import CountDifference, Params
from ..sources.base import CheckpointInfo
from ..sources.safetensors_header import COUNTER_SUFFIXES


@dataclass
class GraphCounts:
    parameters: int
    trainable: int
    buffers: int
    counters: int
    non_persistent: int
    tied: list[list[str]]
    tied_scalars: int  # scalars a checkpoint would hold again if it stored every tied alias
    state: dict[str, tuple[int, ...]]  # persistent state-dict name -> shape (aliases included)
    non_persistent_names: dict[str, tuple[int, ...]]


def count_graph(model: nn.Module) -> GraphCounts:
    groups: dict[int, list[str]] = {}
    numel: dict[int, int] = {}
    trainable = 0
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) not in groups:
            groups[id(p)] = []
            numel[id(p)] = p.numel()
            trainable += p.numel() if p.requires_grad else 0
        groups[id(p)].append(name)
    parameters = sum(numel.values())
    tied = [names for names in groups.values() if len(names) > 1]
    tied_scalars = sum(numel[k] * (len(v) - 1) for k, v in groups.items() if len(v) > 1)

    state: dict[str, tuple[int, ...]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        state[name] = tuple(p.shape)
    buffers = counters = non_persistent = 0
    seen: set[int] = set()
    np_names: dict[str, tuple[int, ...]] = {}
    for mod_name, mod in model.named_modules(remove_duplicate=False):
        for bname, b in mod._buffers.items():
            if b is None:
                continue
            full = f"{mod_name}.{bname}" if mod_name else bname
            persistent = bname not in mod._non_persistent_buffers_set
            if persistent:
                state[full] = tuple(b.shape)
            else:
                np_names[full] = tuple(b.shape)
            if id(b) in seen:
                continue
            seen.add(id(b))
            if not persistent:
                non_persistent += b.numel()
            elif full.endswith(COUNTER_SUFFIXES):
                counters += b.numel()
            else:
                buffers += b.numel()
    return GraphCounts(parameters, trainable, buffers, counters, non_persistent, tied, tied_scalars, state, np_names)


# Buffers that checkpoints saved by older library versions hold and the
# current implementation no longer has.  Each entry: model_type ->
# (tensor-name pattern, what it is, scalars as a function of the config).
def _gpt2_mask(c) -> int:
    return int(c.n_layer) * int(c.n_positions) ** 2


def _llama_inv_freq(c) -> int:
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return int(c.num_hidden_layers) * (int(head_dim) // 2)


LEGACY_BUFFERS: dict[str, list[tuple[str, str, Callable[[Any], int]]]] = {
    "gpt2": [("h.*.attn.bias", "per-layer causal-mask buffers (1x1xPxP) that older transformers versions saved", _gpt2_mask)],
    "llama": [
        (
            "model.layers.*.self_attn.rotary_emb.inv_freq",
            "per-layer rotary inv_freq buffers that older transformers versions saved",
            _llama_inv_freq,
        )
    ],
}


def _pattern(name: str) -> str:
    return re.sub(r"\.\d+\.", ".*.", name)


def _group(names: dict[str, int]) -> dict[str, tuple[int, list[str]]]:
    out: dict[str, tuple[int, list[str]]] = {}
    for n, k in names.items():
        p = _pattern(n)
        s, lst = out.get(p, (0, []))
        lst.append(n)
        out[p] = (s + k, lst)
    return out


def _align(ckpt: dict[str, tuple[int, ...]], graph: dict[str, tuple[int, ...]], prefixes: list[str]) -> dict[str, str]:
    """Map checkpoint names onto graph names, trying base-model prefixes both ways."""
    best: dict[str, str] = {}
    for pre in [""] + prefixes:
        for mode in ("add", "strip"):
            m = {}
            for k in ckpt:
                if mode == "add":
                    g = pre + k if pre else k
                else:
                    g = k[len(pre) :] if pre and k.startswith(pre) else k
                if g in graph:
                    m[k] = g
            if len(m) > len(best):
                best = m
    return best


def compare(g: GraphCounts, ckpt: CheckpointInfo, model: nn.Module, config: Any) -> tuple[list[CountDifference], bool]:
    derived = g.parameters + g.buffers
    delta = derived - ckpt.scalars
    if delta == 0:
        return [], True
    diffs: list[CountDifference] = []
    if ckpt.tensors is not None:
        prefix = getattr(model, "base_model_prefix", "") or ""
        prefixes = [f"{prefix}."] if prefix else []
        ck = {k: v for k, v in ckpt.tensors.items() if not k.endswith(COUNTER_SUFFIXES)}
        graph = {k: v for k, v in g.state.items() if not k.endswith(COUNTER_SUFFIXES)}
        mapping = _align(ck, graph, prefixes)
        matched_graph = set(mapping.values())
        # Tied aliases: a graph name whose tensor is stored under another alias counts once.
        alias_of = {}
        for group in g.tied:
            for n in group:
                alias_of[n] = group
        only_graph: dict[str, int] = {}
        tied_twice: dict[str, int] = {}
        for name, shape in graph.items():
            if name in matched_graph:
                continue
            aliases = alias_of.get(name)
            if aliases and any(a in matched_graph for a in aliases if a != name):
                continue  # tied alias of a stored tensor: counted once on both sides
            if aliases and name != aliases[0]:
                continue
            only_graph[name] = math.prod(shape)
        for group in g.tied:
            stored = [a for a in group if a in matched_graph]
            for extra in stored[1:]:
                tied_twice[extra] = math.prod(graph[extra])
        only_ckpt = {k: math.prod(v) for k, v in ck.items() if k not in mapping}
        mismatch = {k: (math.prod(graph[mapping[k]]) - math.prod(v)) for k, v in ck.items() if k in mapping and tuple(graph[mapping[k]]) != tuple(v)}
        np_names = set(g.non_persistent_names)
        for pat, (s, names) in _group(only_ckpt).items():
            is_np = any(n in np_names or (prefixes and prefixes[0] + n in np_names) for n in names)
            cause = "stored in the checkpoint, a non-persistent buffer in the current implementation" if is_np else "stored in the checkpoint, not in the current implementation"
            diffs.append(CountDifference(scalars=-s, cause=cause, tensors=[pat] if len(names) > 1 else names))
        for pat, (s, names) in _group(only_graph).items():
            diffs.append(CountDifference(scalars=s, cause="in the graph, absent from the checkpoint", tensors=[pat] if len(names) > 1 else names))
        for s, names in _group(tied_twice).values():
            diffs.append(CountDifference(scalars=-s, cause="tied weight stored twice in the checkpoint, counted once in the graph", tensors=names))
        for k, d in mismatch.items():
            diffs.append(CountDifference(scalars=d, cause=f"shape differs: checkpoint {list(ck[k])}, graph {list(graph[mapping[k]])}", tensors=[k]))
        return diffs, sum(d.scalars for d in diffs) == delta

    # Only a recorded total: name a cause only when it accounts for the delta exactly.
    candidates: list[CountDifference] = []
    if g.non_persistent:
        groups = _group({k: math.prod(v) for k, v in g.non_persistent_names.items()})
        if len(groups) > 1:
            candidates.append(CountDifference(scalars=-g.non_persistent, cause="the checkpoint stores all non-persistent buffers of the current implementation", tensors=sorted(groups)))
        for pat, (s, _names) in groups.items():
            candidates.append(CountDifference(scalars=-s, cause="the checkpoint stores a buffer that the current implementation keeps non-persistent", tensors=[pat]))
    if g.tied_scalars:
        candidates.append(CountDifference(scalars=-g.tied_scalars, cause="the checkpoint stores tied weights once per alias", tensors=[", ".join(t) for t in g.tied]))
    if g.counters:
        candidates.append(CountDifference(scalars=-g.counters, cause="the checkpoint count includes BatchNorm num_batches_tracked counters", tensors=["*.num_batches_tracked"]))
    for pat, why, fn in LEGACY_BUFFERS.get(getattr(config, "model_type", None) or "", []):
        try:
            held = int(fn(config))
        except Exception:
            continue
        candidates.append(CountDifference(scalars=-held, cause=f"the checkpoint holds {why}", tensors=[pat]))
    for c in candidates:
        if c.scalars == delta:
            return [c], True
    for i, a in enumerate(candidates):
        for b in candidates[i + 1 :]:
            if a.scalars + b.scalars == delta:
                return [a, b], True
    return [], False


def build_params(model: nn.Module, ckpt: CheckpointInfo | None, config: Any) -> Params:
    g = count_graph(model)
    derived = g.parameters + g.buffers
    p = Params(
        parameters=g.parameters,
        trainable=g.trainable,
        buffers=g.buffers,
        counters=g.counters,
        non_persistent_buffers=g.non_persistent,
        derived=derived,
        tied=g.tied,
    )
    if ckpt is not None:
        p.checkpoint = ckpt.scalars
        p.checkpoint_source = ckpt.source
        p.checkpoint_date = ckpt.date
        p.checkpoint_counters = ckpt.counters if ckpt.tensors is not None else None
        p.delta = derived - ckpt.scalars
        p.delta_pct = round(100.0 * p.delta / ckpt.scalars, 4) if ckpt.scalars else None
        p.differences, p.explained = compare(g, ckpt, model, config)
    return p
