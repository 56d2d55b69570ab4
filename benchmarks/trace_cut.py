"""The layer table's trace, whole and from two cut traces: the same table, and how long each takes.

    python benchmarks/trace_cut.py                                   # every catalog model
    python benchmarks/trace_cut.py --ids meta-llama/Llama-2-7b-hf,gpt2 --repeat 5
    python benchmarks/trace_cut.py path/to/config.json               # a config (or model folder)

For each model, in one process: build it and plan its inputs as ``--plan`` does,
then trace it (forward and backward on fake tensors, the layer table's events)
``--repeat`` times each way, alternating: **whole** (every layer run) and **cut**
(``neurarch.trace.cut``: the layer list cut to 2 and 3 repeats and the full
depth read off them, where ``neurarch.pipeline`` offers the cut; a model it does
not offer is traced whole either way).  Each trace runs on a fresh build of the
model (a trace moves the model to fake tensors), after one untimed trace of the
same model that warms FakeTensor's cache, so both ways run at cache hits.

Per model it prints the layer list offered (or why none), the median seconds
each way (every run in brackets), and whether the two ways give the same layer
table, rows and all (names, types, output shapes, parameters, calls), the same
parameters without a gradient and the same output shape: "same" is checked on
every run, and any difference exits 1.  "cut used": whether the cut traces
showed the full depth (else the cut side fell back to tracing it whole).
Not a test: the seconds depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import platform
import statistics
import sys
import time


def _ids(arg: str | None, positional: list[str]) -> list[str]:
    if positional:
        return positional
    if arg:
        return [s.strip() for s in arg.split(",") if s.strip()]
    from neurarch.sources.catalog import entries

    return sorted(entries())


def _run(spec: str, cutting: bool, counter: list[int]):
    """One fresh build, traced one way: (seconds, the table and the rest as plain data, whether the cut was used)."""
    from neurarch.inputs.prepare import prepare
    from neurarch.options import Options, PlanOptions
    from neurarch.pipeline import _repeats
    from neurarch.trace import trace
    from neurarch.trace.structure import build_structure

    opts = dataclasses.replace(Options(), plan=PlanOptions(), cache=False)
    p = prepare(spec, opts, recipe=False)
    model = p.built.model
    rep = _repeats(model)
    late = []
    for one in rep:  # each list's last layer's calls: none when the cut traces showed the full depth
        layers = model.get_submodule(one.path)
        late.append(layers[len(layers) - 1].register_forward_pre_hook(lambda *_: counter.__setitem__(0, counter[0] + 1)))
    counter[0] = 0
    t = time.perf_counter()
    r = trace(model, p.plan, repeats=rep if cutting else None)
    seconds = time.perf_counter() - t
    for hook in late:
        hook.remove()
    s = build_structure(model, r.recorder.events, None, r.unused_parameters)
    data = (s.model_dump(), r.output_shape, r.forward.ok, r.backward.ok if r.backward else None, r.forward.error, r.backward.error if r.backward else None)
    used = bool(rep) and cutting and counter[0] == 0
    return seconds, data, rep, used


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", help="model ids or config paths (default: --ids, else every catalog model)")
    ap.add_argument("--ids", help="comma-separated model ids")
    ap.add_argument("--repeat", type=int, default=3, help="traces each way per model (default 3)")
    a = ap.parse_args()
    if a.repeat < 1:
        ap.error("--repeat must be at least 1")
    ids = _ids(a.ids, a.models)
    gc.disable()  # as a plan's trace runs (neurarch.jobs.hold_collection)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; python {platform.python_version()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    print(f"each trace {a.repeat} times each way, alternating (whole first, then cut first, ...); medians, every run in brackets\n")
    print("| model | layer list offered | whole s | cut s | cut used | same table |")
    print("|---|---|---:|---:|---|---|")
    differ = []
    counter = [0]
    for spec in ids:
        try:
            _run(spec, True, counter)  # untimed: FakeTensor's cache warm for both ways
            times: dict[bool, list[float]] = {True: [], False: []}
            first = None
            same = True
            used = set()
            rep = None
            for i in range(a.repeat):
                for cutting in (False, True) if i % 2 == 0 else (True, False):
                    seconds, data, rep, was_used = _run(spec, cutting, counter)
                    times[cutting].append(seconds)
                    if cutting:
                        used.add(was_used)
                    if first is None:
                        first = data
                    elif data != first:
                        same = False
        except Exception as e:  # noqa: BLE001 - one model's failure is a row, not the end
            print(f"| {spec} | error: {type(e).__name__}: {str(e).strip().splitlines()[0][:120] if str(e).strip() else ''} | | | | |")
            differ.append(spec)
            continue
        if not same:
            differ.append(spec)
        offered = " and ".join(f"`{one.path}`, {one.units} repeats of {one.period}" + (f" after {one.head} special" if one.head else "") for one in rep or ()) or "none"

        def cell(xs: list[float]) -> str:
            return f"{statistics.median(xs):.2f} ({', '.join(f'{x:.2f}' for x in xs)})"

        print(f"| {spec} | {offered} | {cell(times[False])} | {cell(times[True])} | {'yes' if used == {True} else 'no' if used == {False} else 'mixed'} | {'yes' if same else 'NO'} |")
    print(f"\n{len(ids) - len(differ)} of {len(ids)} the same table both ways")
    if differ:
        sys.exit(f"different or failed: {', '.join(differ)}")


if __name__ == "__main__":
    main()
