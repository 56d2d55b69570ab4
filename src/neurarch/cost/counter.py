"""Per-operator work of a training step, read off the fake-tensor trace.

``OpCounter`` is a small ``TorchDispatchMode`` (the design of
``torch.utils.flop_counter``): it sees every aten op the forward and backward
passes run and records, per op,

* FLOPs, from torch's own FLOP formulas (``torch.utils.flop_counter.flop_registry``)
  plus the ones torch lacks — notably the CPU scaled-dot-product-attention ops
  that a CPU trace runs, which torch's counter counts as zero;
* bytes read and written: every distinct input and output tensor once, at the
  element size of the chosen precision (views and metadata ops move nothing).

Known approximations (each named where it is made):
* element-wise ops count 0 FLOPs (as torch's counter does); they are memory-bound,
  so their time comes from their bytes;
* under mixed precision every floating tensor is counted at 2 bytes, though
  autocast keeps a few ops (softmax, norms, losses) in fp32;
* attention FLOPs are the full s x s products, as the usual convention counts
  them; the roofline halves the time of causal attention (``causal`` flag),
  as FlashAttention-style kernels skip the masked half.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count

from ..fake.tensors import PlainHandlerMode, device_query
from .price import OpRecord

aten = torch.ops.aten


def _shape(t) -> tuple[int, ...]:
    return tuple(int(d) for d in t.shape)


# CPU SDPA kernels: same algebra as the CUDA flash kernels torch already counts.
# q: [b, h, s_q, d], k: [b, h_kv, s_k, d], v: [b, h_kv, s_k, d_v]
def _cpu_sdpa(args, kwargs, out) -> int:
    q, k, v = args[0], args[1], args[2]
    return sdpa_flop_count(_shape(q), _shape(k), _shape(v))


def _cpu_sdpa_backward(args, kwargs, out) -> int:
    grad_out, q, k, v = args[0], args[1], args[2], args[3]
    return sdpa_backward_flop_count(_shape(grad_out), _shape(q), _shape(k), _shape(v))


def _torch_formula(op):
    f = flop_registry[op]

    def count(args, kwargs, out):
        return int(f(*args, **kwargs, out_val=out))

    return count


EXTRA_FORMULAS = {}
for _name, _fn in (
    ("_scaled_dot_product_flash_attention_for_cpu", _cpu_sdpa),
    ("_scaled_dot_product_flash_attention_for_cpu_backward", _cpu_sdpa_backward),
):
    if hasattr(aten, _name):
        EXTRA_FORMULAS[getattr(aten, _name)] = _fn

ATTENTION_OPS = {str(op) for op in EXTRA_FORMULAS} | {str(op) for op in flop_registry if "attention" in str(op)}

# Ops that move no data: metadata, views and aliases.
_FREE = {
    "aten.detach",
    "aten.t",
    "aten.view",
    "aten._unsafe_view",
    "aten.transpose",
    "aten.expand",
    "aten.slice",
    "aten.unsqueeze",
    "aten.squeeze",
    "aten.permute",
    "aten.alias",
    "aten.lift_fresh",
    "aten.select",
    "aten.as_strided",
    "aten.reshape",
    "aten._reshape_alias",
    "aten.split",
    "aten.unbind",
    "aten.chunk",
    "aten.narrow",
    "aten.unflatten",
    "aten.empty",
    "aten.empty_strided",
    "aten.zeros",
    "aten.ones",
    "aten.arange",
    "aten.randint",
    "aten.full",
    "aten.new_empty",
    "aten.new_empty_strided",
    "aten.sym_size",
    "aten.sym_stride",
    "aten.sym_numel",
    "aten.is_same_size",
}


def _argument(func, args, kwargs, name: str):
    """The value of a named schema argument, positional or keyword."""
    for i, a in enumerate(func._schema.arguments):
        if a.name == name:
            if i < len(args) and not a.kwarg_only:
                return args[i]
            return kwargs.get(name, a.default_value)
    return None


_WEIGHT_GRAD_OPS = {"aten.mm", "aten.addmm"}


@dataclass
class OpCounter(PlainHandlerMode):
    """Records every op; set ``phase`` before each pass."""

    float_bytes: int = 4  # element size for floating tensors at the chosen precision
    phase: str = "forward"
    records: list[OpRecord] = field(default_factory=list)
    unknown_matmul_like: set[str] = field(default_factory=set)
    # Shapes of the model's 2-d weights: a backward mm whose output has one (or its
    # transpose) computes that weight's gradient, which LoRA's frozen base skips.
    weight_shapes: frozenset = frozenset()

    def __post_init__(self):
        super().__init__()

    def _bytes(self, tensors) -> int:
        seen = set()
        total = 0
        for t in tensors:
            if not isinstance(t, torch.Tensor):
                continue
            key = (id(t),)
            if key in seen:
                continue
            seen.add(key)
            size = self.float_bytes if t.dtype.is_floating_point else t.element_size()
            total += t.numel() * size
        return total

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        device = device_query(func, args)
        if device is not None:  # a fake tensor's device query: no work, not recorded (as every prim op)
            return device
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func.overloadpacket
        name = str(packet)
        if name in _FREE or func.is_view or name.startswith("prim."):
            return out
        formula = EXTRA_FORMULAS.get(packet)
        if formula is None and packet in flop_registry:
            formula = _torch_formula(packet)
        flops = 0
        if formula is not None:
            try:
                flops = formula(args, kwargs, out)
            except Exception:  # a formula that cannot read these args: visible, not silent
                self.unknown_matmul_like.add(name)
        ins, _ = tree_flatten((args, kwargs))
        outs, _ = tree_flatten(out)
        causal = name in ATTENTION_OPS and _argument(func, args, kwargs, "is_causal") is True
        weight_grad = (
            self.phase == "backward"
            and name in _WEIGHT_GRAD_OPS
            and isinstance(out, torch.Tensor)
            and out.dim() == 2
            and (tuple(out.shape) in self.weight_shapes or tuple(out.shape)[::-1] in self.weight_shapes)
        )
        self.records.append(OpRecord(name, self.phase, int(flops), self._bytes(ins) + self._bytes(outs), formula is not None, causal, weight_grad))
        return out
