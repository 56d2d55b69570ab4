"""Trace a model's own weight initialisation, without touching any weight.

transformers models initialise through ``model.initialize_weights()``, which
walks the modules and calls ``torch.nn.init`` functions (``normal_``,
``uniform_``, ``zeros_`` ...) with the scale the reference implementation
chose: GPT-2 gives its residual output projections
``std = initializer_range / sqrt(2 * n_layer)``, Llama gives every Linear the
same ``initializer_range``.  Rather than writing those formulas down per
architecture, we run the model's own init under a ``TorchFunctionMode`` that
records each ``torch.nn.init`` call (tensor, scale) and returns without
executing it.  In-place tensor methods (``mul_``, ``fill_`` ...) are recorded
and skipped too, so the model is left exactly as it was.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn
from torch.overrides import TorchFunctionMode


@dataclass
class InitCall:
    fn: str
    std: Optional[float]  # the standard deviation the call draws with; None when unknown


def _fan_in_out(t: torch.Tensor) -> tuple[int, int]:
    if t.dim() < 2:
        return int(t.numel()), int(t.numel())
    receptive = math.prod(int(d) for d in t.shape[2:]) if t.dim() > 2 else 1
    return int(t.shape[1]) * receptive, int(t.shape[0]) * receptive


def _std_of(fn: str, t: torch.Tensor, args: tuple, kwargs: dict) -> Optional[float]:
    """Standard deviation of the distribution an init call draws from."""

    def arg(i, name, default=None):
        if name in kwargs:
            return kwargs[name]
        return args[i] if len(args) > i else default

    try:
        if fn in ("normal_", "trunc_normal_"):
            return float(arg(2, "std", 1.0))
        if fn == "uniform_":
            a, b = float(arg(1, "a", 0.0)), float(arg(2, "b", 1.0))
            return (b - a) / math.sqrt(12)
        fan_in, fan_out = _fan_in_out(t)
        if fn in ("xavier_normal_", "xavier_uniform_"):
            return float(arg(1, "gain", 1.0)) * math.sqrt(2.0 / (fan_in + fan_out))
        if fn in ("kaiming_normal_", "kaiming_uniform_"):
            a = float(arg(1, "a", 0.0))
            mode = arg(2, "mode", "fan_in")
            nonlin = arg(3, "nonlinearity", "leaky_relu")
            gain = torch.nn.init.calculate_gain(nonlin, a)
            return gain / math.sqrt(fan_in if mode == "fan_in" else fan_out)
        if fn in ("zeros_", "zero_", "constant_", "ones_", "fill_", "eye_", "dirac_"):
            return 0.0
    except (TypeError, ValueError):
        return None
    return None


_INIT_MODULES = {"torch.nn.init", "transformers.initialization"}


class _InitRecorder(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[int, InitCall] = {}  # id(tensor) -> last call

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        # transformers swaps torch.nn.init's functions for guarded copies while it initialises,
        # so torch's own handle_torch_function hands us the transformers version.
        is_init = getattr(func, "__module__", "") in _INIT_MODULES
        if is_init or name.endswith("_"):
            t = args[0] if args else kwargs.get("tensor")
            if isinstance(t, torch.Tensor):
                # An in-place op on an initialised tensor (mul_, div_ ...) rescales it: unknown afterwards.
                std = _std_of(name, t, args, kwargs) if is_init or name in ("fill_", "zero_") else None
                self.calls[id(t)] = InitCall(name, std)
                return t
        return func(*args, **kwargs)


def traced_init(model: nn.Module) -> Optional[dict[str, InitCall]]:
    """Parameter name -> the last init call on it, from the model's own init code.

    Returns None when the model has no traceable init (plain modules: their
    init ran in ``__init__``, when the model was built).
    """
    init = getattr(model, "initialize_weights", None)
    if not callable(init):
        return None
    flags = {}
    for m in model.modules():  # transformers skips modules it marked initialised
        if "_is_hf_initialized" in m.__dict__:
            flags[m] = m.__dict__.pop("_is_hf_initialized")
    rec = _InitRecorder()
    try:
        with rec, torch.no_grad():
            init()
    finally:
        for m in model.modules():
            m.__dict__.pop("_is_hf_initialized", None)
        for m, v in flags.items():
            m.__dict__["_is_hf_initialized"] = v
    names = {}
    for name, p in model.named_parameters():
        call = rec.calls.get(id(p))
        if call is not None:
            names[name] = call
    return names
