"""Where one memory simulation's time goes: cProfile and FakeTensor's dispatch-cache counters.

    python benchmarks/profile_sim.py gpt2 lora 8      # model, mode, batch (a card's check: steady state)

Builds the model and its inputs as ``--plan`` does, runs the simulation once
to warm up, then once more at ``batch + 1`` under cProfile (the figures of a
check simulation: step 2 alone, the simulation cache off).  Prints the
seconds, FakeTensor's cache hits / misses / bypasses by reason for that run,
the share of the time spent building the cache key's argument part (neurarch.fake.cachekey's
``prep_args_for_hash``, or torch's ``_prep_args_for_hash`` where that is not installed)
and in the live-storage tracker's own code, how many ops the tracker sees in one
more such run and how many of them are a fake tensor's device queries, and the
top functions by own time.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import dataclasses
import pstats
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("mode", choices=("lora", "qlora", "full"))
    ap.add_argument("batch", type=int, help="a card's check batch; the profiled run is at batch + 1")
    a = ap.parse_args()
    if a.batch < 1:
        ap.error("batch must be at least 1")
    spec, mode, batch = a.model, a.mode, a.batch
    from torch._subclasses.fake_tensor import FakeTensorMode as F

    from neurarch.inputs.prepare import prepare
    from neurarch.options import Options, PlanOptions
    from neurarch.plan.memory import estimate_with_curve, with_batch
    from neurarch.plan.train import TrainSetup

    opts = dataclasses.replace(Options(), plan=PlanOptions())
    p = prepare(spec, opts)
    setup = TrainSetup.from_plan(opts.plan, mode=mode, precision=opts.precision)

    def run(b: int):
        return estimate_with_curve(p.trained, with_batch(p.plan, b), setup, steady_only=True, cache=False)

    run(batch)
    F.cache_hits, F.cache_misses = 0, 0
    F.cache_bypasses.clear()
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    run(batch + 1)
    prof.disable()
    total = time.perf_counter() - t
    info = F.cache_info()
    stats = pstats.Stats(prof)
    cum = {f"{k[0].rsplit('/', 1)[-1]}:{k[2]}": v[3] for k, v in stats.stats.items()}  # type: ignore[attr-defined]
    # The key's argument part: neurarch's function where it is installed (it hands unusual calls to torch's), else torch's.
    key = cum.get("cachekey.py:prep_args_for_hash") or cum.get("fake_tensor.py:_prep_args_for_hash", 0.0)
    tracker = cum.get("tracker.py:__torch_dispatch__", 0.0) - cum.get("fake_tensor.py:__torch_dispatch__", 0.0)
    print(f"{spec} {mode} at batch {batch + 1} (steady state): {total:.2f} s")
    print(f"FakeTensor cache: {info.hits} hits, {info.misses} misses, bypasses {dict(sorted(info.bypasses.items(), key=lambda kv: -kv[1]))}")
    print(f"cache key building: {key:.2f} s ({100 * key / total:.0f} %); the tracker's own code: {tracker:.2f} s ({100 * tracker / total:.0f} %)\n")
    ops = count_ops(lambda: run(batch + 2))
    print(f"ops the tracker saw at batch {batch + 2}: {sum(ops.values())}, of which device queries (prim.device): {ops.get('prim.device.default', 0)}\n")
    stats.sort_stats("tottime").print_stats(15)


def count_ops(body) -> "collections.Counter[str]":
    """The ops the live-storage tracker sees while ``body()`` runs, by name (another run, not profiled;
    ``fake_floor.py`` counts with it too)."""
    from neurarch.plan.tracker import LiveTracker

    seen: collections.Counter[str] = collections.Counter()
    dispatch = LiveTracker.__torch_dispatch__

    def counting(self, func, types, args=(), kwargs=None):
        seen[str(func)] += 1
        return dispatch(self, func, types, args, kwargs)

    LiveTracker.__torch_dispatch__ = counting  # type: ignore[method-assign]
    try:
        body()
    finally:
        LiveTracker.__torch_dispatch__ = dispatch  # type: ignore[method-assign]
    return seen


if __name__ == "__main__":
    main()
