"""Simulate a deep model at two small depths and extrapolate, exactly.

A 70B decoder is 80 copies of one layer.  Simulating its training step costs
time in proportion to the number of layers, and the planner simulates many
(mode, batch) pairs.  This module simulates the model cut to a few layers of
its repeated stack, twice (``units`` = 2 and 3 repeats), and extrapolates to
the real depth — and checks, op by op, that the extrapolation is exact.

Why it is exact.  Live bytes only rise inside an op (its outputs are
allocated) and only fall between ops, so the peak is the live total right
after some op.  Label each op by where it runs: outside the stack (embedding,
head, loss, the optimizer's multi-tensor ops), or in the stack's first, second
or last repeat, or its head/tail layers, plus its ordinal there.  For a stack
of identical repeats, the live total after a labelled op is an affine function
of the number of repeats n: every repeat adds the same weights, gradients,
optimizer state and saved activations.  Inside the stack, the live total at
the same op of repeat b is affine in b, so the middle repeats never exceed the
second or the last one.  Two depths therefore fix every label's line, and the
peak at depth n is the largest of the lines at n.

What is checked (else the caller simulates the whole model):

* the stack: the largest ``nn.ModuleList``; its layers' structure (classes,
  parameter shapes and dtypes, plain attributes but layer indices) must be
  periodic, after at most a few special head layers; every other periodic
  layer list outside it with as many repeats (an encoder beside its decoder,
  CLIP's two towers) is cut in the same runs to the same number of repeats, so
  each op's live bytes stay affine in that one number;
* the two runs make the same labelled ops, and each labelled op allocates the
  same bytes in both (so the repeats really behave alike, routing and all).

Nothing here knows any architecture: the cut model is the real module with a
shorter layer list, run by the same simulator.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import weakref
from collections import defaultdict
from dataclasses import dataclass
from typing import overload

from torch import nn

from .tracker import Life

MIN_UNITS = 4  # below this the cut saves too little to be worth two runs
MAX_PERIOD = 8
MAX_HEAD = 3
_INDEX_ATTR = re.compile(r"(^|_)(layer_?idx|layer_?id|layer_?number|layer_?index|idx|index|block_?id|block_?idx)$", re.I)


@dataclass(frozen=True)
class Stack:
    """The repeated layer list: ``head`` special layers, then repeats of ``period``
    layers, then ``length - head - units * period`` tail layers (a partial repeat)."""

    path: str
    length: int
    head: int
    period: int

    @property
    def units(self) -> int:
        return (self.length - self.head) // self.period

    @property
    def rest(self) -> int:
        return (self.length - self.head) % self.period

    def depth(self, units: int) -> int:
        return self.head + units * self.period + self.rest

    def describe(self) -> str:
        what = f"{self.units} repeats of {self.period} layer{'s' * (self.period > 1)}"
        if self.head:
            what += f" after {self.head} special"
        return f"`{self.path}` ({self.length} layers: {what})"


def _simple(v) -> bool:
    if v is None or isinstance(v, (bool, int, float, str)):
        return True
    return isinstance(v, (tuple, list)) and len(v) <= 16 and all(x is None or isinstance(x, (bool, int, float, str)) for x in v)


def _signature(layer: nn.Module) -> str:
    parts: list[tuple[object, ...]] = []
    for name, mod in layer.named_modules():
        attrs = sorted((k, repr(v)) for k, v in vars(mod).items() if not k.startswith("_") and _simple(v) and not _INDEX_ATTR.search(k))
        parts.append((name, type(mod).__qualname__, tuple(attrs)))
    for name, p in layer.named_parameters():
        parts.append((name, tuple(p.shape), str(p.dtype), p.requires_grad))
    for name, b in layer.named_buffers():
        parts.append((name, tuple(b.shape), str(b.dtype)))
    return repr(parts)


def _periodic(path: str, layers: nn.ModuleList) -> Stack | None:
    """``layers`` as a stack: its smallest period after the fewest head layers, or None."""
    sigs = [_signature(layer) for layer in layers]
    length = len(sigs)
    for period in range(1, MAX_PERIOD + 1):
        for head in range(0, MAX_HEAD + 1):
            if all(sigs[i] == sigs[i + period] for i in range(head, length - period)):
                stack = Stack(path, length, head, period)
                return stack if stack.units >= MIN_UNITS else None
    return None


def find_stack(model: nn.Module) -> Stack | None:
    """The largest layer list whose layers repeat with a short period, or None."""
    best: tuple[int, str, nn.ModuleList] | None = None
    for path, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList) and len(mod) >= MIN_UNITS and path:
            n = sum(p.numel() for p in mod.parameters())
            if best is None or n > best[0]:
                best = (n, path, mod)
    if best is None:
        return None
    _, path, layers = best
    return _periodic(path, layers)


def _nested(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def find_stacks(model: nn.Module) -> tuple[Stack, ...]:
    """:func:`find_stack`'s stack, then every other layer list outside it that repeats
    as many times (an encoder beside its decoder, CLIP's text tower beside its vision
    tower).  Cut to the same number of repeats together, every op's live bytes stay
    affine in that one number, so two runs still fix each line.  Empty if none."""
    first = find_stack(model)
    if first is None:
        return ()
    stacks = [first]
    for path, mod in model.named_modules():
        # As deep as the first stack or deeper: its layers make one segment of a pipeline cut (by_depth.segment_bytes).
        deep = path.count(".") >= first.path.count(".")
        if isinstance(mod, nn.ModuleList) and len(mod) >= MIN_UNITS and path and deep and not any(_nested(path, s.path) for s in stacks):
            other = _periodic(path, mod)
            if other is not None and other.units == first.units:
                stacks.append(other)
    return tuple(stacks)


def describe(stacks: tuple[Stack, ...]) -> str:
    """The stacks for a note: one, or several cut together."""
    return " and ".join(s.describe() for s in stacks)


@contextlib.contextmanager
def cut(model: nn.Module, stack: Stack | tuple[Stack, ...], units: int):
    """``model`` with its stack (or each of its stacks) cut to the first
    ``stack.depth(units)`` layers, in place, for the block (copy it inside the
    block to keep the cut model)."""
    stacks = stack if isinstance(stack, tuple) else (stack,)
    saved = []
    try:
        for s in stacks:
            parent_path, _, attr = s.path.rpartition(".")
            parent = model.get_submodule(parent_path) if parent_path else model
            full = getattr(parent, attr)
            saved.append((parent, attr, full))
            setattr(parent, attr, nn.ModuleList(list(full)[: s.depth(units)]))
        yield model
    finally:
        for parent, attr, full in reversed(saved):
            setattr(parent, attr, full)


_STACKS: "weakref.WeakKeyDictionary[nn.Module, Stack | None]" = weakref.WeakKeyDictionary()


def stack_of(model: nn.Module) -> Stack | None:
    """:func:`find_stack`, once per model (the planner and the cost count both ask)."""
    if model not in _STACKS:
        _STACKS[model] = find_stack(model)
    return _STACKS[model]


_ALL_STACKS: "weakref.WeakKeyDictionary[nn.Module, tuple[Stack, ...]]" = weakref.WeakKeyDictionary()


def stacks_of(model: nn.Module) -> tuple[Stack, ...]:
    """:func:`find_stacks`, once per model."""
    if model not in _ALL_STACKS:
        _ALL_STACKS[model] = find_stacks(model)
    return _ALL_STACKS[model]


def _which(role: tuple) -> int:
    """The stack a role is in: roles in the first stack are (kind, ordinal), in the k-th (kind, ordinal, k)."""
    return role[2] if len(role) > 2 else 0


# --------------------------------------------------------------------------
# Lining up two runs op by op
# --------------------------------------------------------------------------

CATEGORIES = _CATS = ("weights", "gradients", "optimizer", "activations", "temporary")


@dataclass
class _Point:
    total: int
    rounded: int
    allocated: int
    cats: tuple[int, ...]
    step: int
    phase: str
    module: str | None
    order: int = 0
    copies: int = 0  # live bytes of dtype copies of weights (autocast's casts)  # the op's place in its run (ties go to the earliest, as a replay would)


def points(lives: list[Life], ops: list, stack: Stack | tuple[Stack, ...], units: int, category, rounding) -> dict[tuple, _Point]:
    """Label -> live bytes at the end of that labelled stretch, for one run at ``units``
    repeats (of each stack, when several are cut together).

    Ops that allocate nothing cannot hold a peak and are skipped.  Consecutive
    allocating ops of one label with no free between them only add to the live
    total, so they form one stretch whose peak is its end: this folds the
    optimizer's per-parameter state creation (as many ops as parameters) into
    one labelled point.
    """
    n = max((max(x.start, x.end or 0) for x in lives), default=0) + 2
    delta = [0] * n
    delta_r = [0] * n
    alloc = [0] * n
    freed = [0] * n
    dcopy = [0] * n
    born: dict[int, str | None] = {}
    dcat = [[0] * n for _ in _CATS]
    index = {c: i for i, c in enumerate(_CATS)}
    for x in lives:
        c = dcat[index[category(x)]]
        r = rounding(x.nbytes)
        delta[x.start] += x.nbytes
        delta_r[x.start] += r
        alloc[x.start] += x.nbytes
        born[x.start] = x.module
        c[x.start] += x.nbytes
        if x.weight_copy:
            dcopy[x.start] += x.nbytes
            if x.end is not None:
                dcopy[x.end] -= x.nbytes
        if x.end is not None:
            delta[x.end] -= x.nbytes
            delta_r[x.end] -= r
            c[x.end] -= x.nbytes
            freed[x.end] += 1

    def cumsum(a):
        return list(itertools.accumulate(a))

    live, live_r, allocated, frees, copies = cumsum(delta), cumsum(delta_r), cumsum(alloc), cumsum(freed), cumsum(dcopy)
    cats = [cumsum(c) for c in dcat]
    stacks = stack if isinstance(stack, tuple) else (stack,)
    prefixes = [(re.compile(re.escape(st.path) + r"\.(\d+)(?:\.|$)"), st, () if k == 0 else (k,)) for k, st in enumerate(stacks)]
    where: dict[str, tuple | None] = {}  # module -> (layer index, its stack, the stack's role suffix), or None: outside every stack

    def stack_layer(module: str) -> tuple | None:
        if module not in where:
            found = next(((m, st, k) for prefix, st, k in prefixes if (m := prefix.match(module))), None)
            where[module] = None if found is None else (int(found[0].group(1)), found[1], found[2])
        return where[module]

    counters: dict[tuple, int] = defaultdict(int)
    open_: dict[tuple, tuple[tuple, int]] = {}  # label -> (its key, frees count at its last op)
    points: dict[tuple, _Point] = {}
    prev = 0
    last_birth = 0
    for order, (ev, step, phase, module) in enumerate(ops):
        made = allocated[ev] - allocated[prev]
        for e in range(ev, prev, -1):  # the op's last allocation: the module it is counted against
            if e in born:
                last_birth = e
                break
        prev = ev
        if made == 0 or phase == "set-up":
            continue
        found = stack_layer(module) if module else None
        roles: list[tuple] = []
        if found is None:
            roles.append(("out",))
        else:
            i, st, k = found
            if i < st.head:
                roles.append(("head", i, *k))
            else:
                b, o = divmod(i - st.head, st.period)
                if b >= units:
                    roles.append(("tail", i - st.head - units * st.period, *k))
                else:
                    if b == 0:
                        roles.append(("first", o, *k))
                    if b == 1:
                        roles.append(("second", o, *k))
                    if b == units - 1 and b >= 1:
                        roles.append(("last", o, *k))
        for role in roles:
            label = (step, phase, *role)
            last = open_.get(label)
            if last is not None and last[1] == frees[ev]:
                key = last[0]  # no free since this label's last op: the same stretch goes on
                made_before = points[key].allocated
            else:
                j = counters[label]
                counters[label] = j + 1
                key = (*label, j)
                made_before = 0
            points[key] = _Point(live[ev], live_r[ev], made_before + made, tuple([c[ev] for c in cats]), step, phase, born.get(last_birth, module), order, copies[ev])
            open_[label] = (key, frees[ev])
    return points


class NotRepeating(Exception):
    """The two cut runs do not line up: the stack's repeats do not behave alike.
    ``ops``: the two runs' op counts, where the caller knows them (what a retry would cost)."""

    ops: tuple[int, int] | None = None


def _rename(module: str | None, stack: Stack | tuple[Stack, ...], role: tuple, units_from: int, units_to: int) -> str | None:
    """The module name at the full depth, for a label seen in a cut run."""
    if module is None or role[0] not in ("last", "tail"):
        return module
    st = stack[_which(role)] if isinstance(stack, tuple) else stack
    prefix = re.compile(re.escape(st.path) + r"\.(\d+)(?=\.|$)")
    m = prefix.match(module)
    if m is None:
        return module
    i = int(m.group(1))
    i += (units_to - units_from) * st.period
    return f"{st.path}.{i}{module[m.end() :]}"


_PLACES = {"first": "the first repeat", "second": "the second repeat", "last": "the last repeat", "head": "a layer before the repeats", "tail": "a layer after the repeats"}


def _where(key: tuple, stack: Stack | tuple[Stack, ...]) -> str:
    """A label in words, for a message: the step, the phase and where in the model."""
    role = key[2:-1]
    if role[0] == "out":
        place = "a module outside the layer stack"
    else:
        st = stack[_which(role)] if isinstance(stack, tuple) else stack
        place = f"{_PLACES.get(role[0], role[0])} of `{st.path}`"
    return f"step {key[0]}'s {key[1]}, {place}"


def extrapolate(a: dict[tuple, _Point], b: dict[tuple, _Point], units_a: int, units_b: int, stack: Stack | tuple[Stack, ...]) -> dict[tuple, _Point]:
    """Each label's line through the runs at ``units_a`` and ``units_b`` repeats, at the stack's own
    (the stacks', when several are cut together: they repeat as many times)."""
    if a.keys() != b.keys():
        differ = sorted(set(a) ^ set(b), key=lambda key: (key[0], repr(key)))
        raise NotRepeating(f"cut to {units_a} and {units_b} repeats, the model ran different ops ({len(differ)} differ, the first in {_where(differ[0], stack)})")
    n = (stack[0] if isinstance(stack, tuple) else stack).units
    k = (n - units_a) / (units_b - units_a)
    out: dict[tuple, _Point] = {}
    for key, pa in a.items():
        pb = b[key]
        # The optimizer's stretches hold per-parameter state and scratch: they grow with the depth.
        if pa.allocated != pb.allocated and not (key[1] == "optimizer" and key[2] == "out"):
            raise NotRepeating(f"an op in {_where(key, stack)} allocated {pa.allocated:,} bytes cut to {units_a} repeats and {pb.allocated:,} cut to {units_b}")

        def line(x: int, y: int) -> int:
            v = x + (y - x) * k
            return int(round(v))

        role = key[2:-1]
        total = line(pa.total, pb.total)
        cats = [line(x, y) for x, y in zip(pa.cats, pb.cats)]
        if key[2] == "second" and min(cats) < 0:
            # At 2 repeats the second repeat is also the last one: what it makes may outlive
            # the phase there (a returned output) and not at 3 or more, so the 2-repeat run's
            # split between saved activations and scratch is not this op's.  The split is
            # read off the 3-repeat run (a middle repeat, as at the real depth) and grown
            # by what the same op of the first repeat gains per repeat (other repeats'
            # caches, gradients, state: the same for every repeat but the last).  Only
            # where the plain line goes negative, the symptom; a smaller shift between
            # the two categories would pass unseen (the total stays exact either way).
            twin = (key[0], key[1], "first", *key[3:])
            if twin not in a or twin not in b:
                raise NotRepeating(f"an op in {_where(key, stack)} has no counterpart in the first repeat")
            per = [(y - x) / (units_b - units_a) for x, y in zip(a[twin].cats, b[twin].cats)]
            cats = [int(round(y + g * (n - units_b))) for y, g in zip(pb.cats, per)]
        if sum(cats) != total or min(cats) < 0:
            raise NotRepeating(f"the memory breakdown at an op in {_where(key, stack)} does not extrapolate")
        out[key] = _Point(
            total,
            line(pa.rounded, pb.rounded),
            pb.allocated,
            tuple(cats),
            pb.step,
            pb.phase,
            _rename(pb.module, stack, role, units_b, n),
            pb.order,
            line(pa.copies, pb.copies),
        )
    return out


def peak_over(points: dict[tuple, _Point], keep) -> tuple[_Point | None, int]:
    """The largest total among labels ``keep(step, phase)`` accepts, and the largest rounded total."""
    best: _Point | None = None
    best_r = 0
    for p in points.values():
        if not keep(p.step, p.phase):
            continue
        if best is None or p.total > best.total or (p.total == best.total and p.order < best.order):
            best = p
        best_r = max(best_r, p.rounded)
    return best, best_r


@overload
def line_int(a: int, b: int, units_a: int, units_b: int, units: int) -> int: ...
@overload
def line_int(a: int | None, b: int | None, units_a: int, units_b: int, units: int) -> int | None: ...
def line_int(a: int | None, b: int | None, units_a: int, units_b: int, units: int) -> int | None:
    """An integer figure that grows by the same amount per repeat (parameters, KV cache)."""
    if a is None or b is None:
        return None
    if (b - a) % (units_b - units_a):
        raise NotRepeating(f"a per-repeat figure is not whole: {a} at {units_a}, {b} at {units_b}")
    return a + (b - a) // (units_b - units_a) * (units - units_a)
