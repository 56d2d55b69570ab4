"""The layer table of a deep model from two short traces, checked event by event.

A 32-layer decoder runs one layer's code 32 times; its trace records each
layer's module calls and functional ops, the same records with another index.
Here the model is traced with its repeated layer list cut to 2 and to 3
repeats (the real module with a shorter list, as the planner's simulations cut
it: :mod:`neurarch.plan.depth`), and the full depth's events are the 3-repeat
trace's with the third repeat's records copied for every later repeat, each
naming its own layer.  That is used only where it is shown to hold:

* the 3-repeat trace's events are the 2-repeat trace's, in the same order,
  with the same names, types, output shapes and call counts, plus one block of
  consecutive events, all inside the third repeat's layers;
* that block is the second repeat's events, index for index (names shifted by
  one repeat, the same types, output shapes and call counts);
* the parameters that got no gradient repeat the same way;
* nothing outside the layer list counts calls per layer (a module shared by
  the layers, called from each, fails the first check: its call count differs);
* no value was guessed (a model that routes on values, MoE, is traced whole).

Otherwise (or when a cut run fails) the caller traces the whole model.  The
forward and backward passes that count as run are the two cut ones: the
layers they skip are the same code on the same shapes.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

from torch import nn

from .recorder import Event


@dataclass(frozen=True)
class Repeats:
    """A layer list to cut: ``path`` (a ``nn.ModuleList``) of ``units`` repeats of
    ``period`` layers, nothing before or after them."""

    path: str
    period: int
    units: int


@contextlib.contextmanager
def cut_to(model: nn.Module, rep: Repeats, units: int):
    """``model`` with its layer list cut to the first ``units`` repeats, in place, for the block."""
    parent_path, _, attr = rep.path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    full = getattr(parent, attr)
    setattr(parent, attr, nn.ModuleList(list(full)[: units * rep.period]))
    try:
        yield model
    finally:
        setattr(parent, attr, full)


def _index(rep: Repeats, name: str) -> tuple[int, str] | None:
    """(layer index, the rest of the name) for a name inside the layer list, else None."""
    prefix = rep.path + "."
    if not name.startswith(prefix):
        return None
    m = re.match(r"(\d+)(.*)$", name[len(prefix) :])
    if m is None or (m.group(2) and not m.group(2).startswith(".")):
        return None
    return int(m.group(1)), m.group(2)


def _shifted(rep: Repeats, name: str, by: int) -> str:
    i, rest = _index(rep, name)  # type: ignore[misc]  # only called on names inside the list
    return f"{rep.path}.{i + by * rep.period}{rest}"


def _same(a: Event, b: Event, names: bool = True) -> bool:
    return (not names or a.name == b.name) and a.kind == b.kind and a.op == b.op and a.caller_depth == b.caller_depth and a.output_shape == b.output_shape and a.calls == b.calls and a.done == b.done


def _in_repeat(rep: Repeats, name: str, r: int) -> bool:
    ix = _index(rep, name)
    return ix is not None and r * rep.period <= ix[0] < (r + 1) * rep.period


def extend(model: nn.Module, rep: Repeats, two: list[Event], three: list[Event], unused2: list[str], unused3: list[str]) -> tuple[list[Event], list[str]] | None:
    """The full depth's events and unused parameters from the 2- and 3-repeat traces'
    (see the module's docstring), or None where they do not show it holds."""
    block = [i for i, e in enumerate(three) if _in_repeat(rep, e.name, 2)]
    if not block or block != list(range(block[0], block[-1] + 1)):
        return None
    lo, hi = block[0], block[-1] + 1
    rest = three[:lo] + three[hi:]
    if len(rest) != len(two) or not all(_same(a, b) and a.module is b.module for a, b in zip(rest, two)):
        return None
    second = [e for e in three if _in_repeat(rep, e.name, 1)]
    added = three[lo:hi]
    if len(second) != len(added) or not all(_same(a, b, names=False) and _shifted(rep, a.name, 1) == b.name for a, b in zip(second, added)):
        return None
    # Parameters without a gradient: the 2-repeat run's, plus the third repeat's, which are the second's shifted.
    in2 = [n for n in unused3 if _in_repeat(rep, n, 2)]
    if [n for n in unused3 if not _in_repeat(rep, n, 2)] != unused2 or [_shifted(rep, n, 1) for n in unused2 if _in_repeat(rep, n, 1)] != in2:
        return None
    later = []
    for r in range(3, rep.units):
        for e in added:
            name = _shifted(rep, e.name, r - 2)
            module = model.get_submodule(name) if e.kind == "module" else None
            later.append(Event(e.kind, name, module=module, op=e.op, caller_depth=e.caller_depth, output_shape=e.output_shape, calls=e.calls, done=e.done))
    events = three[:hi] + later + three[hi:]
    wanted = set(unused3) | {_shifted(rep, n, r - 2) for n in in2 for r in range(3, rep.units)}
    unused = [n for n, _ in model.named_parameters() if n in wanted]  # in the model's order, as a whole trace lists them
    if len(unused) != len(wanted):
        return None
    return events, unused
