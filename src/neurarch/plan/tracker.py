"""Follow every tensor storage of a training step from birth to death.

:class:`LiveTracker` is a ``TorchDispatchMode``: it sees the outputs of every
ATen op (under ``FakeTensorMode`` for a simulation, or on real tensors).  For
each output it looks at the tensor's *storage*, so views, in-place results
and tensors sharing memory are counted once.  A new storage is a new
allocation of ``storage.nbytes()`` bytes; a weak reference with a callback on
the storage object tells when Python (or autograd) drops the last reference,
which is when the real allocator would free it.  PyTorch keeps one Python
object per storage for as long as the storage lives ("PyObject
preservation"), so that callback fires exactly once, at the free.

Everything is kept as a list of :class:`Life` records (bytes, birth, death,
step, phase, module) in event order; :mod:`neurarch.plan.memory` replays the
list to find the peak and what was alive at that instant.

Where this comes from: ``torch.distributed._tools.mem_tracker.MemTracker``
uses the same storage/weakref idea.  We differ in three ways: the category of
a storage is decided from its whole life, after the run (an activation is a
forward tensor still alive when backward starts; optimizer state is made in
``step()`` and outlives it), the module in backward comes from the autograd
node being run (no hooks that could hold gradients), and any number of steps
can be tracked without a reset.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from ..fake.tensors import PlainHandlerMode, device_query

# Roles a storage can be given before or outside its life (the rest are decided
# from the lifetime: see memory._category).
WEIGHTS = "weights"
INPUT = "input"
GRADIENT = "gradient"
OPTIMIZER = "optimizer"  # state made by a warm-up step before tracking (steady-state runs)


@dataclass(slots=True)
class Life:
    """One storage: ``nbytes`` alive from event ``start`` to event ``end``."""

    nbytes: int
    start: int
    end: int | None  # None: still alive when tracking stopped
    step: int  # 0 = set-up (weights, inputs), then 1, 2, ...
    phase: str  # set-up | forward | backward | optimizer
    module: str | None
    role: str | None = None  # weights / input / gradient, when known
    survives_forward: bool = False  # set after the run: made in forward, alive when it ended
    survives_optimizer: bool = False  # made in optimizer.step(), alive after the phase
    weight_copy: bool = False  # a dtype copy of a weight (autocast's bf16 cast): what FSDP gathers per layer instead

    def moved(self, start: int, end: int | None) -> Life:
        """This life at other events, all else the same (``dataclasses.replace``, a few times faster)."""
        return Life(self.nbytes, start, end, self.step, self.phase, self.module, self.role, self.survives_forward, self.survives_optimizer, self.weight_copy)

    def resized(self, nbytes: int) -> Life:
        """This life with other bytes, all else the same (``dataclasses.replace``, a few times faster)."""
        return Life(nbytes, self.start, self.end, self.step, self.phase, self.module, self.role, self.survives_forward, self.survives_optimizer, self.weight_copy)


@dataclass(frozen=True, slots=True)
class Carried:
    """A storage :meth:`LiveTracker.carry_back` moved: ``new`` (now made where ``old`` was) was
    made at ``start`` in ``step`` of the run, in ``old``'s place."""

    old: Life
    new: Life
    start: int
    step: int


def uncarried(lives: list[Life], carried: tuple[Carried, ...] | list[Carried]) -> list[Life]:
    """The run's lives as it ran them, before :meth:`LiveTracker.carry_back` (new objects where
    they differ; ``lives`` is left as it is)."""
    if not carried:
        return lives
    back = {id(c.new): c for c in carried}
    out = []
    for x in lives:
        c = back.get(id(x))
        if c is None:
            out.append(x)
        else:
            y = x.moved(c.start, x.end)
            y.step = c.step
            out.append(y)
    return [*(c.old for c in carried), *out]


_TO_COPY = torch.ops.aten._to_copy.default


def _storage_id(t: torch.Tensor) -> int | None:
    try:
        return id(t.untyped_storage())
    except (RuntimeError, NotImplementedError):
        return None


class _ModuleStack:
    """The innermost module running the forward pass, by qualified name.

    Global module hooks keep a stack; ``always_call`` makes the post-hook run
    even when forward raises, so the stack never drifts.
    """

    def __init__(self, root: nn.Module | None, prefix_strip: tuple[str, ...] = ()):
        self.names: dict[int, str] = {}
        if root is not None:
            for name, mod in root.named_modules(remove_duplicate=False):
                for p in prefix_strip:
                    if name.startswith(p):
                        name = name[len(p) :]
                        break
                self.names.setdefault(id(mod), name or type(root).__name__)
        self.stack: list[str] = []
        self._handles: list = []

    def __enter__(self):
        self._handles = [
            nn.modules.module.register_module_forward_pre_hook(self._pre),
            nn.modules.module.register_module_forward_hook(self._post, always_call=True),
        ]
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles = []
        self.stack.clear()

    def _pre(self, mod, args):
        name = self.names.get(id(mod))
        if name is not None:
            self.stack.append(name)

    def _post(self, mod, args, out):
        if id(mod) in self.names and self.stack:
            self.stack.pop()

    @property
    def current(self) -> str | None:
        return self.stack[-1] if self.stack else None


NODE_MODULE = "neurarch.module"  # key in an autograd node's metadata: the module that made it


class _NodeNames(TorchFunctionMode):
    """Remember which module made each autograd node, to name modules in backward.

    A torch-level call's outputs carry their ``grad_fn`` here (we sit above
    autograd), so the node is labelled with the module running at that moment,
    in the node's own ``metadata`` dict: the label lives and dies with the node.
    (Keying a map by ``id(node)`` instead let a dead node's id, reused by a new
    node, carry a stale name: attributions then depended on memory layout.)
    """

    def __init__(self, modules: _ModuleStack):
        super().__init__()
        self.modules = modules
        # The torch-function mode that would sit right below this one, run from here instead
        # (neurarch.fake.cuda.CudaKernels in a simulation): the same handler, in the same order,
        # with one mode fewer on the stack that every torch call passes through.
        self.below: TorchFunctionMode | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        below = self.below
        out = func(*args, **(kwargs or {})) if below is None else below.__torch_function__(func, types, args, kwargs)
        name = self.modules.current
        if name is not None:
            for t in tree_leaves(out) if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    fn = t.grad_fn
                    if fn is not None:
                        fn.metadata[NODE_MODULE] = name
        return out


class LiveTracker(PlainHandlerMode):
    """Record the life of every storage an op creates.  Use as a context manager.

    ``register(t, role)`` declares tensors that exist before tracking starts
    (weights, inputs).  ``set_phase`` / ``step`` are called by the training
    loop.  ``live`` and ``peak`` are running totals of live bytes.
    """

    def __init__(self, root: nn.Module | None = None, *, prefix_strip: tuple[str, ...] = ()):
        super().__init__()
        self.lives: list[Life] = []
        self._by_storage: dict[int, tuple[Life, weakref.ref]] = {}
        self.events = 0
        self.live = 0
        self.peak = 0
        self.step = 0
        self.phase = "set-up"
        self.modules = _ModuleStack(root, prefix_strip)
        self.nodes = _NodeNames(self.modules)
        self._bw_module: str | None = None
        self.closed = False
        # (event, step, phase, module) after each op, when asked for: what
        # neurarch.plan.depth needs to line up two runs op by op.
        self.ops: list[tuple[int, int, str, str | None]] | None = None
        # The fake-tensor gaps' mode (neurarch.fake.gaps.FakeGaps), not pushed: its
        # ``answer(func, args, kwargs)`` runs each op from this one's handler.  Set only when
        # nothing sits between this mode and FakeTensorMode, which is also when this one may
        # answer a fake tensor's device itself (see __torch_dispatch__).
        self.runs_ops: Any = None

    # -- the training loop's calls ---------------------------------------
    def set_phase(self, step: int, phase: str) -> None:
        self.step, self.phase = step, phase
        if phase != "backward":
            self._bw_module = None

    def end_backward(self) -> None:
        """Backward is over: ops from here on belong to no node (kept for the loop's observer)."""

    def register(self, t: torch.Tensor, role: str) -> None:
        """Declare a tensor that already exists (weights, inputs, gradients)."""
        life = self._see(t)
        if life is not None and role is not None:
            life.role = role

    def mark(self, t: torch.Tensor, role: str) -> None:
        """Give the storage under ``t`` a role (e.g. 'gradient' for ``p.grad``)."""
        try:
            entry = self._by_storage.get(id(t.untyped_storage()))
        except (RuntimeError, NotImplementedError):
            return
        if entry is not None:
            entry[0].role = role

    def forget(self, tensors: list[torch.Tensor]) -> None:
        """Drop the lives of the storages under ``tensors``, as if they had never been made
        (what a steady-state run's warm-up made that a real step would not have)."""
        gone = set()
        for t in tensors:
            key = _storage_id(t)
            entry = self._by_storage.pop(key, None) if key is not None else None
            if entry is not None:
                life = entry[0]
                gone.add(id(life))
                if life.end is None:
                    self.live -= life.nbytes
        if gone:
            self.lives = [x for x in self.lives if id(x) not in gone]

    def life_of(self, t: torch.Tensor) -> Life | None:
        """The life of the storage under ``t`` now, if the run has seen it."""
        key = _storage_id(t)
        entry = self._by_storage.get(key) if key is not None else None
        return None if entry is None else entry[0]

    def carry_back(self, replaced: list[tuple[Life, torch.Tensor]], step: int) -> list[Carried]:
        """For each ``(old, t)`` where the storage under ``t`` took the place of ``old``'s during
        the run (a weight cast in place, ``p.data = p.data.to(dtype)``, which frees the old
        storage): the run as if ``t``'s storage had been there from where ``old`` was made, made
        in ``step``, and ``old`` never made.  What a steady-state run does with what a real step 1
        would have left behind.  Returns what moved (:func:`uncarried` undoes it)."""
        moved: list[Carried] = []
        for old, t in replaced:
            new = self.life_of(t)
            if new is None or new is old or old.end is None:  # not replaced, or the old one still held
                continue
            moved.append(Carried(old, new, new.start, new.step))
            new.start, new.step = old.start, step
        if moved:
            gone = {id(c.old) for c in moved}
            self.lives = [x for x in self.lives if id(x) not in gone]
        return moved

    # -- bookkeeping -------------------------------------------------------
    def _module(self, peek: bool = False) -> str | None:
        """The module running now; ``peek`` asks without moving the backward
        attribution on (recording ops must not change what lives are counted against)."""
        if self.phase == "backward":
            node = torch._C._current_autograd_node()
            if node is not None:
                # torch's stub declares Node.metadata a method; on autograd's C++ nodes it is a dict property
                name = node.metadata.get(NODE_MODULE)  # type: ignore[attr-defined]
                if name is not None:
                    if peek:
                        return name
                    self._bw_module = name
            return self._bw_module
        return self.modules.current

    def _see(self, t: torch.Tensor) -> Life | None:
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse, nested: no single storage
            return None
        key = id(st)
        n = st.nbytes()
        entry = self._by_storage.get(key)
        if entry is not None:
            life = entry[0]
            if life.nbytes != n:  # resized in place: a new block, then the old one goes
                new = self._new_life(n)
                self._end(life)
                self._by_storage[key] = (new, entry[1])
                return new
            return life
        life = self._new_life(n)

        def gone(_ref: object, k: int = key) -> None:
            self._freed(k)

        self._by_storage[key] = (life, weakref.ref(st, gone))
        return life

    def _new_life(self, n: int) -> Life:
        self.events += 1
        life = Life(n, self.events, None, self.step, self.phase, self._module())
        self.lives.append(life)
        self.live += n
        if self.live > self.peak:
            self.peak = self.live
        return life

    def _end(self, life: Life) -> None:
        self.events += 1
        life.end = self.events
        self.live -= life.nbytes

    def _freed(self, key: int) -> None:
        entry = self._by_storage.pop(key, None)
        if entry is not None and not self.closed:
            self._end(entry[0])

    # -- dispatch ------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.runs_ops is not None:
            # A fake tensor's device query (neurarch.fake.tensors.device_query) makes no storage:
            # answered here, without the trip through the modes below.  The op is still recorded.
            device = device_query(func, args)
            if device is not None:
                if self.ops is not None and not self.closed:
                    self.ops.append((self.events, self.step, self.phase, self._module(peek=True)))
                return device
        out = func(*args, **(kwargs or {})) if self.runs_ops is None else self.runs_ops.answer(func, args, kwargs)
        if not self.closed:
            lives = [self._see(t) for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
            if func is _TO_COPY and args and isinstance(args[0], torch.Tensor) and lives and lives[0] is not None:
                src = self._by_storage.get(_storage_id(args[0]))
                if src is not None and src[0].role == WEIGHTS and lives[0] is not src[0]:
                    lives[0].weight_copy = True
            if self.ops is not None:
                self.ops.append((self.events, self.step, self.phase, self._module(peek=True)))
        return out

    def __enter__(self):
        self.modules.__enter__()
        self.nodes.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self.nodes.__exit__(*exc)
            self.modules.__exit__(*exc)

    def close(self) -> None:
        """Stop listening (frees after this moment are not events of the run)."""
        self.closed = True
