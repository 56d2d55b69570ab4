"""What an op that FakeTensorMode's cache answers costs: torch's path against neurarch's.

    python benchmarks/fake_hits.py
    python benchmarks/fake_hits.py --calls 200 --rounds 1   # a quick check that the outputs agree

Four ops of a transformer layer, each already in the cache (so every call is a
hit, as most of a simulation's ops are): an elementwise add, a matrix product,
a view and a layer norm (three outputs).  Each is timed on the same fake
tensors: through FakeTensorMode as torch ships it; inside
:func:`neurarch.fake.views.fast_fake` (neurarch's cache key and hit output,
:mod:`neurarch.fake.cachekey`, :mod:`neurarch.fake.hits`); and, as the
simulation runs it, from a dispatch mode right above FakeTensorMode (the
tracker's place), inside the same block: the op passed on (``func(...)``, the
way before) against asked of the cache first (:func:`neurarch.fake.hits.cached`,
no trip back through the dispatcher).  The outputs are compared first (shape,
strides, offset, dtype, storage size and sharing, the tensor's attributes).
Prints microseconds per call, best of five runs of 20,000.  Not a test: the
figures depend on the machine.
"""

from __future__ import annotations

import argparse
import platform
import time

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from neurarch.fake import hits
from neurarch.fake.views import fast_fake

aten = torch.ops.aten
CALLS, ROUNDS = 20_000, 5


def _cases(mode):
    with mode:
        x = torch.empty(8, 512, 2048, dtype=torch.bfloat16)
        flat = torch.empty(4096, 2048, dtype=torch.bfloat16)
        w = torch.empty(2048, 2048, dtype=torch.bfloat16)
        return {
            "add (elementwise)": (aten.add.Tensor, (x, x)),
            "mm (matrix product)": (aten.mm.default, (flat, w)),
            "view": (aten.view.default, (x, [4096, 2048])),
            "native_layer_norm (three outputs)": (aten.native_layer_norm.default, (x, [2048], None, None, 1e-5)),
        }


class _Above(TorchDispatchMode):
    """A dispatch mode right above FakeTensorMode, as the simulation's tracker is: it passes each op
    on (``ask=False``) or asks the cache first (``ask=True``), and keeps its answer to ``op`` (a
    device query may follow it)."""

    def __init__(self, mode, ask: bool, op):
        super().__init__()
        self.mode, self.ask, self.op, self.last = mode, ask, op, None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = hits.cached(self.mode, func, args, kwargs) if self.ask else hits.MISS
        if out is hits.MISS:
            out = func(*args, **(kwargs or {}))
        if func is self.op:
            self.last = out
        return out


def _described(out, args):
    if isinstance(out, tuple):
        return tuple(_described(o, args) for o in out)
    shared = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.untyped_storage()._cdata == out.untyped_storage()._cdata]
    return tuple(out.shape), out.stride(), out.storage_offset(), out.dtype, out.untyped_storage().nbytes(), shared, list(out.__dict__.items())


def _best(fn, calls: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, time.perf_counter() - start)
    return best / calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=CALLS)
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    a = ap.parse_args()
    calls, rounds = a.calls, a.rounds
    print(f"machine: {platform.machine()}, torch {torch.__version__}; microseconds a call, best of {rounds} x {calls:,}")
    mode = FakeTensorMode()
    for name, (op, args) in _cases(mode).items():
        with mode:
            torch_out = op(*args)  # now in the cache
        passed, asked = _Above(mode, False, op), _Above(mode, True, op)
        with fast_fake():
            with mode:
                fast_out = op(*args)
                with passed:
                    op(*args)
                with asked:
                    op(*args)
        same = len({repr(_described(o, args)) for o in (torch_out, fast_out, passed.last, asked.last)}) == 1
        with mode:
            plain = _best(lambda op=op, args=args: op(*args), calls, rounds)
        with fast_fake():
            with mode:
                fast = _best(lambda op=op, args=args: op(*args), calls, rounds)
                with passed:
                    through = _best(lambda op=op, args=args: op(*args), calls, rounds)
                with asked:
                    direct = _best(lambda op=op, args=args: op(*args), calls, rounds)
        print(
            f"{name}: torch {plain * 1e6:.1f} us, fast_fake {fast * 1e6:.1f} us; from a mode above it, passed on "
            f"{through * 1e6:.1f} us, asked of the cache first {direct * 1e6:.1f} us; outputs the same: {same}"
        )


if __name__ == "__main__":
    main()
