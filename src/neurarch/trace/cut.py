"""The layer table of a deep model from two short traces, checked event by event.

A 32-layer decoder runs one layer's code 32 times; its trace records each
layer's module calls and functional ops, the same records with another index.
Here the model is traced with its repeated layer list cut to 2 and to 3
repeats (the real module with a shorter list, as the planner's simulations cut
it: :mod:`neurarch.plan.depth`; special first layers, if any, kept in both), and the full depth's events are the 3-repeat
trace's with the third repeat's records copied for every later repeat, each
naming its own layer.  A model with several such lists that repeat as many
times (an encoder and its decoder, CLIP's two towers) has them all cut together,
each read off the same way.  That is used only where it is shown to hold:

* the 3-repeat trace's events are the 2-repeat trace's, in the same order,
  with the same names, types, output shapes and call counts, plus one block of
  consecutive events for each list, all inside that list's third repeat;
* each block is its list's second repeat's events, index for index (names
  shifted by one repeat, the same types, output shapes and call counts);
* the parameters that got no gradient repeat the same way;
* nothing outside the layer lists counts calls per layer (a module shared by
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
    """A layer list to cut: ``path`` (a ``nn.ModuleList``) of ``head`` special layers
    (T5's first block, which holds the position bias), then ``units`` repeats of
    ``period`` layers, nothing after them."""

    path: str
    period: int
    units: int
    head: int = 0


def as_tuple(reps: "Repeats | tuple[Repeats, ...] | None") -> tuple[Repeats, ...]:
    """One layer list, several, or none, as a tuple."""
    if reps is None:
        return ()
    return reps if isinstance(reps, tuple) else (reps,)


@contextlib.contextmanager
def cut_to(model: nn.Module, reps: "Repeats | tuple[Repeats, ...]", units: int):
    """``model`` with its layer list (each of its lists) cut to the first ``units`` repeats, in place, for the block."""
    saved = []
    try:
        for rep in as_tuple(reps):
            parent_path, _, attr = rep.path.rpartition(".")
            parent = model.get_submodule(parent_path) if parent_path else model
            full = getattr(parent, attr)
            saved.append((parent, attr, full))
            setattr(parent, attr, nn.ModuleList(list(full)[: rep.head + units * rep.period]))
        yield model
    finally:
        for parent, attr, full in reversed(saved):
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
    return ix is not None and rep.head + r * rep.period <= ix[0] < rep.head + (r + 1) * rep.period


def extend(model: nn.Module, reps: "Repeats | tuple[Repeats, ...]", two: list[Event], three: list[Event], unused2: list[str], unused3: list[str]) -> tuple[list[Event], list[str]] | None:
    """The full depth's events and unused parameters from the 2- and 3-repeat traces'
    (see the module's docstring), or None where they do not show it holds."""
    reps = as_tuple(reps)
    spans = []  # each list's block in the 3-repeat trace: (lo, hi)
    for rep in reps:
        block = [i for i, e in enumerate(three) if _in_repeat(rep, e.name, 2)]
        if not block or block != list(range(block[0], block[-1] + 1)):
            return None
        spans.append((block[0], block[-1] + 1))
    inside = {i for lo, hi in spans for i in range(lo, hi)}
    rest = [e for i, e in enumerate(three) if i not in inside]
    if len(rest) != len(two) or not all(_same(a, b) and a.module is b.module for a, b in zip(rest, two)):
        return None
    for rep, (lo, hi) in zip(reps, spans):
        second = [e for e in three if _in_repeat(rep, e.name, 1)]
        added = three[lo:hi]
        if len(second) != len(added) or not all(_same(a, b, names=False) and _shifted(rep, a.name, 1) == b.name for a, b in zip(second, added)):
            return None
    # Parameters without a gradient: the 2-repeat run's, plus each list's third repeat's, which are its second's shifted.
    in_third = lambda n: any(_in_repeat(rep, n, 2) for rep in reps)  # noqa: E731
    if [n for n in unused3 if not in_third(n)] != unused2:
        return None
    wanted = set(unused3)
    for rep in reps:
        in2 = [n for n in unused3 if _in_repeat(rep, n, 2)]
        if [_shifted(rep, n, 1) for n in unused2 if _in_repeat(rep, n, 1)] != in2:
            return None
        wanted |= {_shifted(rep, n, r - 2) for n in in2 for r in range(3, rep.units)}
    # Each list's later repeats go right after its third repeat's block.
    after = {hi: (rep, three[lo:hi]) for rep, (lo, hi) in zip(reps, spans)}
    events: list[Event] = []
    for i in range(len(three) + 1):
        if i in after:
            rep, added = after[i]
            for r in range(3, rep.units):
                for e in added:
                    name = _shifted(rep, e.name, r - 2)
                    module = model.get_submodule(name) if e.kind == "module" else None
                    events.append(Event(e.kind, name, module=module, op=e.op, caller_depth=e.caller_depth, output_shape=e.output_shape, calls=e.calls, done=e.done))
        if i < len(three):
            events.append(three[i])
    unused = [n for n, _ in model.named_parameters() if n in wanted]  # in the model's order, as a whole trace lists them
    if len(unused) != len(wanted):
        return None
    return events, unused
