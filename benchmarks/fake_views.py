"""What a fake ``view`` at shapes FakeTensorMode's cache has not seen costs: torch's function against neurarch's.

    python benchmarks/fake_views.py

A Swin window partition (``x.view(b, 8, 7, 8, 7, 96)`` of a ``[b, 3136, 96]``
tensor, contiguous) and a transposed attention output folded back
(``[b, 12, 197, 64]`` transposed to ``[b, 197, 12, 64]``, then ``view(b, 197, 768)``,
which is no view: both hand it to torch's error), at 300 batches each, so every
call is a cache miss as at a new batch of a plan.  Each implementation is called
as FakeTensorMode calls it (``op_implementations_dict``'s entry for ``aten.view``),
on the same fake tensors; the outputs are compared (shape, strides, storage offset,
storage) before anything is timed.  Prints microseconds per call, best of three.
Not a test: the figures depend on the machine.
"""

from __future__ import annotations

import argparse
import platform
import time

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from neurarch.fake import views

VIEW = torch.ops.aten.view.default


def _cases(mode):
    with mode:
        windows = [(torch.empty(b, 3136, 96), [b, 8, 7, 8, 7, 96]) for b in range(1, 301)]
        folded = [(torch.empty(b, 12, 197, 64).transpose(1, 2), [b, 197, 768]) for b in range(1, 301)]
    return {"Swin window partition (a view)": windows, "transposed heads folded (no view: the error)": folded}


def _call(fn, mode, t, shape):
    try:
        out = fn(mode, VIEW, t, shape)
    except Exception as e:  # noqa: BLE001 - compared, not raised
        return type(e).__name__
    return tuple(out.shape), out.stride(), out.storage_offset(), out.untyped_storage()._cdata == t.untyped_storage()._cdata


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    print(f"machine: {platform.machine()}, torch {torch.__version__}")
    for name, cases in _cases(FakeTensorMode()).items():
        seconds = {}
        for label, fn in (("torch", views._TORCH_VIEW), ("neurarch", views.view_meta)):
            best = float("inf")
            for _ in range(3):
                mode = FakeTensorMode()  # a fresh mode: its cache would answer nothing here anyway
                fresh = [(mode.from_tensor(torch.empty_strided(t.shape, t.stride())), s) for t, s in cases]
                start = time.perf_counter()
                for t, s in fresh:
                    _call(fn, mode, t, s)
                best = min(best, time.perf_counter() - start)
            seconds[label] = best / len(cases)
        mode = FakeTensorMode()
        same = all(_call(views._TORCH_VIEW, mode, t, s) == _call(views.view_meta, mode, t, s) for t, s in [(mode.from_tensor(torch.empty_strided(t.shape, t.stride())), s) for t, s in cases])
        print(f"{name}: torch {seconds['torch'] * 1e6:,.0f} us, neurarch {seconds['neurarch'] * 1e6:,.0f} us a call; outputs the same: {same}")


if __name__ == "__main__":
    main()
