"""What a FakeTensor cache miss costs, beside the meta kernel it runs.

    python benchmarks/fake_misses.py
    python benchmarks/fake_misses.py --calls 500

At a batch a simulation has not run before, every op whose shapes depend on the batch
misses FakeTensorMode's dispatch cache: FakeTensorMode computes the output (its meta
kernel or a Python decomposition), wraps it as a FakeTensor and stores a cache entry.
For each op here: microseconds a call of a miss (inside ``neurarch.fake.views.fast_fake``,
as a simulation runs it: each call at shapes not seen before, asked from a dispatch mode
right above FakeTensorMode, as the simulation's tracker asks), computed by FakeTensorMode
(``neurarch.fake.misses.COMPUTE`` off) and as neurarch computes it where it can
(:mod:`neurarch.fake.misses`: the op's meta kernel without FakeTensorMode's path around it),
and the same op's meta kernel alone on plain meta tensors of those shapes (what a miss
cannot do without).  Best of ``--rounds``.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class Asks(TorchDispatchMode):
    """Right above FakeTensorMode, asking its cache first, as the simulation's tracker does
    (also used by benchmarks/custom_ops.py)."""

    def __init__(self, fake):
        super().__init__()
        self.fake = fake

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from neurarch.fake import hits

        out = hits.cached(self.fake, func, args, kwargs)
        return func(*args, **(kwargs or {})) if out is hits.MISS else out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    from torch._subclasses.fake_tensor import FakeTensorMode

    from neurarch.fake import misses
    from neurarch.fake.views import fast_fake

    aten = torch.ops.aten
    cases = [
        ("mm (matrix product)", lambda i: (torch.empty(8 + i, 64), torch.empty(64, 64)), aten.mm.default),
        ("add (elementwise, a Python reference)", lambda i: (torch.empty(8 + i, 64), torch.empty(8 + i, 64)), aten.add.Tensor),
        ("view", lambda i: (torch.empty(8 + i, 64), [4, (8 + i) * 16]), aten.view.default),
        ("transpose", lambda i: (torch.empty(8 + i, 64), 0, 1), aten.transpose.int),
        ("silu", lambda i: (torch.empty(8 + i, 64),), aten.silu.default),
        ("_to_copy to bf16", lambda i: (torch.empty(8 + i, 64),), lambda x: aten._to_copy.default(x, dtype=torch.bfloat16)),
        ("addmm (a linear layer; a Python decomposition)", lambda i: (torch.empty(64), torch.empty(8 + i, 64), torch.empty(64, 64)), aten.addmm.default),
        ("native_layer_norm, fp32", lambda i: (torch.empty(8 + i, 64), [64], torch.empty(64), torch.empty(64), 1e-5), aten.native_layer_norm.default),
        ("gelu_backward", lambda i: (torch.empty(8 + i, 64), torch.empty(8 + i, 64)), aten.gelu_backward.default),
    ]
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; python {platform.python_version()}, torch {torch.__version__}")
    print(f"best of {a.rounds} x {a.calls} calls, microseconds a call, every call at shapes not seen before\n")
    print("| op | a miss, FakeTensorMode us | a miss, neurarch us | its meta kernel alone us |")
    print("|---|---:|---:|---:|")
    offset = 0
    for name, make, op in cases:
        miss = ours = meta = float("inf")
        for _ in range(a.rounds):
            for compute in (False, True):
                misses.COMPUTE = compute
                mode = FakeTensorMode(allow_non_fake_inputs=True)
                with fast_fake(), mode:
                    args = [make(offset + i) for i in range(a.calls)]
                    with Asks(mode):
                        t = time.perf_counter()
                        for x in args:
                            op(*x)
                        took = (time.perf_counter() - t) / a.calls
                if compute:
                    ours = min(ours, took)
                else:
                    miss = min(miss, took)
                offset += a.calls
            misses.COMPUTE = True
            plain = [[torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta") if isinstance(v, torch.Tensor) else v for v in make(offset + i)] for i in range(a.calls)]
            t = time.perf_counter()
            for x in plain:
                op(*x)
            meta = min(meta, (time.perf_counter() - t) / a.calls)
            offset += a.calls
        print(f"| {name} | {miss * 1e6:.0f} | {ours * 1e6:.0f} | {meta * 1e6:.0f} |")


if __name__ == "__main__":
    main()
