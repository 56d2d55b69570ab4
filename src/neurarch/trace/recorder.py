"""Record what a forward pass does: module calls, output shapes, functional ops.

Module calls are seen through forward pre/post hooks; residual adds and
activations written as function calls (``x = x + h``, ``F.gelu(x)``) are seen
through a ``TorchFunctionMode`` and attributed to the innermost module running
when they happen.  The result is a flat list of :class:`Event` in execution
order, from which the layer table is cut at any granularity.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

# Functional calls worth a row in the layer table when a container calls them directly.
_ADD = {torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__, torch.Tensor.__iadd__, torch.Tensor.add_}
_ACT = {
    F.relu: "ReLU",
    torch.relu: "ReLU",
    torch.Tensor.relu: "ReLU",
    F.relu_: "ReLU",
    F.gelu: "GELU",
    F.silu: "SiLU",
    torch.tanh: "Tanh",
    torch.Tensor.tanh: "Tanh",
    torch.sigmoid: "Sigmoid",
    torch.Tensor.sigmoid: "Sigmoid",
    F.mish: "Mish",
}


def first_tensor(obj) -> torch.Tensor | None:
    """The first tensor in a module output (tensor, tuple, dict, ModelOutput)."""
    if isinstance(obj, torch.Tensor):
        return obj
    if isinstance(obj, dict):  # ModelOutput is an OrderedDict of the non-None fields
        for v in obj.values():
            t = first_tensor(v)
            if t is not None:
                return t
        return None
    if isinstance(obj, (list, tuple)):
        for v in obj:
            t = first_tensor(v)
            if t is not None:
                return t
    return None


@dataclass
class Event:
    kind: str  # "module" or "op"
    name: str  # module qualified name, or caller name for ops
    module: nn.Module | None = None
    op: str | None = None  # readable op type for kind == "op"
    caller_depth: int = 0
    output_shape: tuple[int, ...] | None = None
    calls: int = 1
    done: bool = False


@dataclass
class Recorder:
    """Hooks a model; ``events`` fills in as the forward pass runs."""

    model: nn.Module
    events: list[Event] = field(default_factory=list)
    stack: list[tuple[str, int]] = field(default_factory=list)  # (qualified name, depth)
    _by_module: dict[int, Event] = field(default_factory=dict)
    _handles: list = field(default_factory=list)
    _op_counts: dict[tuple[str, str], int] = field(default_factory=dict)

    def __post_init__(self):
        # The root is on the stack too (so a failure in its own forward is
        # located), but it is not an event: the table lists what is inside it.
        self._handles.append(self.model.register_forward_pre_hook(self._root_pre))
        self._handles.append(self.model.register_forward_hook(self._root_post))
        for name, mod in self.model.named_modules():
            if mod is self.model:
                continue
            depth = name.count(".") + 1
            self._handles.append(mod.register_forward_pre_hook(self._pre(name, depth, mod)))
            self._handles.append(mod.register_forward_hook(self._post(mod)))

    def _root_pre(self, module, args) -> None:
        self.stack.append(("", 0))

    def _root_post(self, module, args, output) -> None:  # must return None: a value would replace the output
        if self.stack:
            self.stack.pop()

    def _pre(self, name: str, depth: int, mod: nn.Module):
        def hook(module, args):
            self.stack.append((name, depth))
            ev = self._by_module.get(id(mod))
            if ev is None:
                ev = Event("module", name, module=mod, caller_depth=depth)
                self._by_module[id(mod)] = ev
                self.events.append(ev)
            else:
                ev.calls += 1

        return hook

    def _post(self, mod: nn.Module):
        def hook(module, args, output):
            if self.stack:
                self.stack.pop()
            ev = self._by_module.get(id(mod))
            if ev is not None and not ev.done:
                t = first_tensor(output)
                if t is not None:
                    ev.output_shape = tuple(int(d) for d in t.shape)
                ev.done = True

        return hook

    def record_op(self, op: str, out) -> None:
        caller, depth = self.stack[-1] if self.stack else ("", 0)  # "" = the root module
        k = self._op_counts.get((caller, op), 0)
        self._op_counts[(caller, op)] = k + 1
        t = first_tensor(out)
        shape = tuple(int(d) for d in t.shape) if t is not None else None
        label = f"{caller}.{op.lower()}#{k}" if caller else f"{op.lower()}#{k}"
        self.events.append(Event("op", label, op=op, caller_depth=depth, output_shape=shape, done=True))

    @property
    def failed_in(self) -> str | None:
        """Qualified name of the innermost module running (the model's class for the root)."""
        if not self.stack:
            return None
        return self.stack[-1][0] or f"{type(self.model).__name__} (the model's own forward)"

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()


class FunctionalOps(TorchFunctionMode):
    """Sees functional adds/activations and reports them to the recorder."""

    def __init__(self, recorder: Recorder):
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in _ADD:
            # A residual add: two tensors of one shape (not a bias or a scalar).
            if len(args) >= 2 and isinstance(args[0], torch.Tensor) and isinstance(args[1], torch.Tensor) and args[0].shape == args[1].shape and args[0].dim() >= 2:
                self.recorder.record_op("Add", out)
        elif func in _ACT:
            self.recorder.record_op(_ACT[func], out)
        return out
