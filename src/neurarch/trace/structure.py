"""Cut the layer table out of the recorded events.

Default granularity (``depth=None``): one row per compute layer — leaf
modules, and attention/MLP blocks/patch embeddings as one row each — plus the
residual adds and functional activations that containers call directly.
``depth=N``: one row per module at depth N (and leaves above it), functional
ops of modules above depth N.
"""

from __future__ import annotations

from torch import nn

from ..report import Node, Structure
from .recorder import Event
from .types import is_block, readable_type


def _unique_params(module: nn.Module) -> int:
    seen = {}
    for p in module.parameters():
        seen[id(p)] = p.numel()
    return sum(seen.values())


def build_structure(model: nn.Module, events: list[Event], depth: int | None = None, unused_parameters: list[str] | None = None) -> Structure:
    names = {id(m): n for n, m in model.named_modules()}
    nodes: list[Node] = []
    inside_row: str | None = None  # name of the row module whose subtree we are in
    for ev in events:
        if inside_row is not None and (ev.name == inside_row or ev.name.startswith(inside_row + ".")):
            continue
        inside_row = None
        if ev.kind == "op":
            if depth is not None and ev.caller_depth >= depth:
                continue
            nodes.append(Node(index=len(nodes), name=ev.name, type=ev.op, output_shape=_no_batch(ev.output_shape), depth=ev.caller_depth + 1, calls=ev.calls))
            continue
        mod = ev.module
        assert mod is not None  # a module event names its module (only op events have none)
        rtype = readable_type(mod)
        leaf = next(mod.children(), None) is None
        if depth is None:
            is_row = leaf or is_block(mod, rtype)
        else:
            is_row = ev.caller_depth == depth or (leaf and ev.caller_depth < depth)
        if not is_row:
            continue
        inside_row = ev.name  # its submodules and functional ops belong to this row
        if leaf and rtype in ("Identity", "Dropout") and depth is None:
            continue  # no-ops at inference; they clutter the default view
        nodes.append(
            Node(
                index=len(nodes),
                name=names.get(id(mod), ev.name),
                type=rtype,
                module_class=type(mod).__name__,
                output_shape=_no_batch(ev.output_shape),
                parameters=_unique_params(mod),
                depth=ev.caller_depth,
                calls=ev.calls,
            )
        )
    called = {id(ev.module) for ev in events if ev.kind == "module"}
    unused = []
    for n, m in model.named_modules():
        if m is model or id(m) in called:
            continue
        if any(True for _ in m.parameters(recurse=False)):
            unused.append(n)
    return Structure(
        layers=len(nodes),
        depth=depth,
        modules=sum(1 for _ in model.modules()) - 1,
        nodes=nodes,
        unused_modules=unused,
        unused_parameters=list(unused_parameters or []),
    )


def _no_batch(shape):
    if shape is None:
        return None
    return list(shape[1:]) if len(shape) >= 1 else []
