"""Where a ``--plan`` spends its time, phase by phase, beside the weights-only baseline.

    python benchmarks/plan_phases.py                      # the four default models
    python benchmarks/plan_phases.py microsoft/resnet-50  # any models
    python benchmarks/plan_phases.py --warm gpt2          # a second run's phases, on the warm cache
    python benchmarks/plan_phases.py --catalog            # the per-model table of docs/benchmarks.md
    python benchmarks/plan_phases.py --catalog --save DIR # ... keeping each run's JSON in DIR
    python benchmarks/plan_phases.py --catalog --ids gpt2,t5-small   # ... for some catalog models only
    python benchmarks/plan_phases.py --catalog --repeat 3 # ... each model's baseline and cold plan 3 times, alternating: medians
    python benchmarks/plan_phases.py --second gpt2 t5-small  # the warm second plan: seconds, and whether it imported torch

Phases (one fresh process per model, the plan's jobs run one after another,
``NEURARCH_JOBS=1``, so each phase's time is its own; a real run forks them
over the cores): import, build, input plan, trace (forward + backward),
parameter count, every memory simulation (mode, batch, whether it is the
input batch's run (two steps, or step 2 with the first step read off it) or a steady-state check, and whether a check was
read off the lines through simulated batches instead), the cost count,
the verifier and the text render.  Every run gets a fresh simulation cache
directory (``NEURARCH_CACHE_DIR``), so nothing is served from the cache
unless the row says so.

The baseline is what ``accelerate estimate-memory`` does: a fresh process
imports transformers, builds the model's class from its config on the meta
device (``init_empty_weights``) and sums its parameters.

``--catalog`` times, for every catalog model, the baseline, a ``--plan --format
json`` run with an empty cache (fresh process, wall clock, as a user runs it)
and the same command again and a ``--plan`` with another headline card, prices and
epochs, both on the warm cache; it prints the Markdown table and the median ratio.
``--repeat N`` runs the baseline and the cold plan N times per model, alternating
(baseline first, then plan first, ...; a fresh empty cache for every cold plan),
and reports the median of each and their ratio, with every run: on a machine whose
speed drifts, one baseline each is too noisy a denominator.

``--second`` times, per model, a cold ``--plan --format json`` (empty cache),
then the same with another headline card, prices and epochs on that cache:
the report cache (``neurarch.warm``) answers it; the row says whether that
process imported torch or transformers (it must not) and whether its JSON,
timings aside, equals a ``--no-cache`` run of the same options in a fresh cache
directory (an independent cold run; ``--no-check`` skips it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT = ["microsoft/resnet-50", "meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", "bert-base-uncased"]
# Options that only read the simulations.  (Another --headroom or a new card moves a card's
# largest batch: that batch is simulated to check it, so such a run re-simulates the checks.)
SECOND_RUN_ARGS = ["--card", "H100", "--price", "A10G=2.5", "--epochs", "3", "--samples", "20000"]

PHASES_CHILD = r"""
import json, os, sys, time
t0 = time.perf_counter()
import neurarch.pipeline as pl
import neurarch.inputs.prepare as prep
import neurarch.plan.memory as mem
import neurarch.cost as cost
import neurarch.verify as verify
from neurarch.inputs import InputOptions
t_import = time.perf_counter() - t0
rows = [("import neurarch (torch, transformers, pydantic)", t_import)]

def timed(module, name, label):
    f = getattr(module, name)
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            rows.append((label(*a, **k) if callable(label) else label, time.perf_counter() - t))
    setattr(module, name, wrapper)

timed(prep, "build", "build on meta")
timed(prep, "plan_inputs", "input plan")
timed(pl, "trace", "trace forward + backward (the layer table)")
timed(pl, "build_params", "parameter count vs checkpoint")
timed(pl, "build_structure", "layer table")
from neurarch.plan import by_depth
read_until = [by_depth.read_batches()]  # batches read off the lines, as of the last simulation's end
first_until = [mem.first_steps_read_off()]  # input batches whose first step was read off step 2

def simulation_label(built, plan, setup, **k):
    how = ", read off the lines" if by_depth.read_batches() > read_until[0] else ""
    read_until[0] = by_depth.read_batches()
    first = mem.first_steps_read_off() > first_until[0]
    first_until[0] = mem.first_steps_read_off()
    if k.get("steady_only"):
        return f"simulate {setup.mode} at batch {plan.batch} (steady state: a card's check{how})"
    return f"simulate {setup.mode} at batch {plan.batch} (input batch, " + ("step 2, the first step read off it)" if first else "two steps)")

timed(mem, "estimate_with_curve", simulation_label)
timed(cost, "count_step", "cost: count the step's ops")
timed(verify, "run", "verifier")
args = sys.argv[1].split()
seq = int(args[args.index("--seq-len") + 1]) if "--seq-len" in args else None
r = pl.analyze(args[0], pl.Options(inputs=InputOptions(seq_len=seq), plan=pl.PlanOptions()))
t = time.perf_counter()
from neurarch.render import render
render(r, "text", max_rows=80, color=False)
rows.append(("render text", time.perf_counter() - t))
total = time.perf_counter() - t0
print(json.dumps({"rows": rows, "total": total, "errors": r.errors}))
"""

BASELINE_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch, transformers
from accelerate import init_empty_weights
d = json.loads(sys.argv[1])
cfg = transformers.AutoConfig.for_model(d.pop("model_type"), **d)
arch = (getattr(cfg, "architectures", None) or [None])[0]
cls = getattr(transformers, arch, None) if arch else None
with init_empty_weights():
    model = cls._from_config(cfg) if cls is not None else transformers.AutoModel.from_config(cfg)
n = sum(p.numel() for p in model.parameters())
print(json.dumps({"seconds": time.perf_counter() - t0, "parameters": n}))
"""


def _env(cache_dir: str | None = None, jobs: str | None = None) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", NEURARCH_CACHE_DIR=cache_dir or tempfile.mkdtemp(prefix="neurarch-bench-"))
    if jobs is not None:
        env["NEURARCH_JOBS"] = jobs
    return env


def catalog_config(model_id: str) -> dict:
    from neurarch.sources.catalog import lookup  # the bundled offline catalog

    return lookup(model_id).config()


def baseline(model_id: str) -> float:
    out = subprocess.run([sys.executable, "-c", BASELINE_CHILD, json.dumps(catalog_config(model_id))], capture_output=True, text=True, check=True, env=_env())
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def plan_seconds(model_id: str, cache_dir: str, extra: list[str] = (), save: Path | None = None) -> float:
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "neurarch.cli", model_id, "--plan", "--format", "json", *extra], capture_output=True, check=True, env=_env(cache_dir))
    seconds = time.perf_counter() - t
    if save is not None:
        save.parent.mkdir(parents=True, exist_ok=True)
        save.write_bytes(out.stdout)
    return seconds


def machine() -> str:
    import torch
    import transformers

    return (
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.2f} at start; python {platform.python_version()}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


def _group(row: str) -> str:
    """A simulation row's group: its mode's input batch, batch 2, or the cards' checks."""
    import re

    m = re.match(r"simulate (\w+) at batch (\d+) \((input batch|steady state)", row)
    if m is None:
        return row
    if m.group(3) == "input batch":
        kind = "input batch (two steps)" if row.endswith("two steps)") else "input batch (step 2, the first step read off it)"
    else:
        kind = "batch 2" if m.group(2) == "2" else "card checks"
    if kind == "card checks" and row.endswith("read off the lines)"):
        kind = "card checks read off the lines (nothing simulated)"
    return f"simulate {m.group(1)}: {kind}"


def phases(models: list[str], warm: bool = False) -> None:
    print(machine())
    if warm:
        print("\nsecond runs: each model's plan run once first, then profiled on the warm cache")
    for spec in models:
        env = _env(jobs="1")
        if warm:
            subprocess.run([sys.executable, "-c", PHASES_CHILD, spec], capture_output=True, text=True, env=env)
        out = subprocess.run([sys.executable, "-c", PHASES_CHILD, spec], capture_output=True, text=True, env=env)
        if out.returncode:
            print(f"\n{spec}: failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}")
            continue
        res = json.loads(out.stdout.strip().splitlines()[-1])
        t0 = time.perf_counter()
        try:
            base = f"{baseline(spec.split()[0]):.2f} s"
        except Exception as e:  # noqa: BLE001 - a model outside the catalog has no baseline here
            base = f"n/a ({type(e).__name__})"
        print(f"\n### {spec}: {res['total']:.2f} s in one process, jobs one after another (weights-only baseline {base})\n")
        print("| phase | runs | seconds | share |")
        print("|---|---:|---:|---:|")
        merged: dict[str, list[float]] = {}
        for name, s in res["rows"]:
            merged.setdefault(_group(name), []).append(s)
        for name, ss in merged.items():
            print(f"| {name} | {len(ss)} | {sum(ss):.2f} | {100 * sum(ss) / res['total']:.0f} % |")
        if res["errors"]:
            print(f"\nsection errors: {res['errors']}")
        del t0


def catalog(save: Path | None = None, ids: list[str] | None = None, repeat: int = 1) -> None:
    """The per-model table; ``save``: also write each run's JSON there (``ID.1.json`` on the empty cache,
    ``ID.2.json`` the same command again on the warm cache), to compare with a snapshot.  ``repeat``:
    the baseline and the cold plan that many times each, alternating; the medians and their ratio."""
    from neurarch.sources.catalog import entries

    print(machine())
    print(f"fresh process per run, wall clock; --plan with an empty cache, the same again on the warm cache, then on the warm cache with `{' '.join(SECOND_RUN_ARGS)}`")
    if repeat > 1:
        print(f"baseline and cold --plan {repeat} times each per model, alternating; medians, every run in brackets")
    print()
    print("| model | baseline s | --plan s | ratio | same again s | other headline card, prices, epochs s |")
    print("|---|---:|---:|---:|---:|---:|")
    ratios = []
    seconds = []
    for model_id in ids or entries():
        name = model_id.replace("/", "_")
        bases: list[float] = []
        firsts: list[float] = []
        cache = ""
        for r in range(repeat):
            order = ("base", "plan") if r % 2 == 0 else ("plan", "base")
            for what in order:
                if what == "base":
                    bases.append(baseline(model_id))
                else:
                    cache = tempfile.mkdtemp(prefix="neurarch-bench-")
                    firsts.append(plan_seconds(model_id, cache, save=save / f"{name}.1.json" if save else None))
        base, first = statistics.median(bases), statistics.median(firsts)
        same = plan_seconds(model_id, cache, save=save / f"{name}.2.json" if save else None)
        other = plan_seconds(model_id, cache, SECOND_RUN_ARGS)
        ratios.append(first / base)
        seconds.append(other)
        if repeat > 1:
            runs = lambda v: " (" + ", ".join(f"{x:.2f}" for x in v) + ")"  # noqa: E731
            print(f"| {model_id} | {base:.2f}{runs(bases)} | {first:.2f}{runs(firsts)} | {first / base:.2f}x | {same:.2f} | {other:.2f} |", flush=True)
        else:
            print(f"| {model_id} | {base:.2f} | {first:.2f} | {first / base:.1f}x | {same:.2f} | {other:.2f} |", flush=True)
    print(
        f"\nmedian ratio {statistics.median(ratios):.2f}x, worst {max(ratios):.2f}x, {sum(r <= 3 for r in ratios)} of {len(ratios)} at 3x or under; "
        f"second run (other card, prices ...) median {statistics.median(seconds):.2f} s, worst {max(seconds):.2f} s; load average {os.getloadavg()[0]:.2f} at the end"
    )


SECOND_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
sys.argv = ["neurarch-trace", *json.loads(sys.argv[1])]
from neurarch.cli import main
rc = main()
print(json.dumps({"rc": rc, "seconds": time.perf_counter() - t0, "imported": sorted(m for m in ("torch", "transformers") if m in sys.modules)}), file=sys.stderr)
"""


def _second_run(args: list[str], cache_dir: str, out: Path) -> dict:
    """neurarch-trace ARGS in a fresh process (as the console command), its JSON written to ``out``."""
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", SECOND_CHILD, json.dumps([*args, "-o", str(out)])], capture_output=True, text=True, env=_env(cache_dir))
    wall = time.perf_counter() - t
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("{")]
    res = json.loads(lines[-1]) if lines else {"rc": p.returncode, "imported": ["?"]}
    return {**res, "wall": wall}


def _same(a: Path, b: Path) -> bool:
    keep = lambda p: [ln for ln in p.read_text().splitlines() if '"seconds"' not in ln and '"tool"' not in ln]  # noqa: E731
    return a.exists() and b.exists() and keep(a) == keep(b)


def second(models: list[str], check: bool = True) -> None:
    print(machine())
    print(f"fresh process per run, wall clock; a cold `--plan --format json`, then `--plan --format json {' '.join(SECOND_RUN_ARGS)}` on its cache\n")
    print("| model | cold --plan s | warm: other card, prices, epochs s | imported torch/transformers | equals a --no-cache run |")
    print("|---|---:|---:|---|---|")
    walls = []
    work = Path(tempfile.mkdtemp(prefix="neurarch-second-"))
    for model_id in models:
        name = model_id.replace("/", "_")
        cache = tempfile.mkdtemp(prefix="neurarch-bench-")
        cold = _second_run([model_id, "--plan", "--format", "json"], cache, work / f"{name}.cold.json")
        warm = _second_run([model_id, "--plan", "--format", "json", *SECOND_RUN_ARGS], cache, work / f"{name}.warm.json")
        same = "not checked"
        if check:
            _second_run([model_id, "--plan", "--format", "json", *SECOND_RUN_ARGS, "--no-cache"], tempfile.mkdtemp(prefix="neurarch-bench-"), work / f"{name}.ref.json")
            same = "yes" if _same(work / f"{name}.warm.json", work / f"{name}.ref.json") else "NO"
        walls.append(warm["wall"])
        print(f"| {model_id} | {cold['wall']:.2f} | {warm['wall']:.2f} | {', '.join(warm['imported']) or 'neither'} | {same} |", flush=True)
    print(f"\nwarm second plan: median {statistics.median(walls):.2f} s, worst {max(walls):.2f} s; load average {os.getloadavg()[0]:.2f} at the end; JSON in {work}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="model ids (default: the four default models); not with --catalog")
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--warm", action="store_true", help="a second run's phases, on the warm cache")
    how.add_argument("--catalog", action="store_true", help="the per-model table of docs/benchmarks.md")
    how.add_argument("--second", action="store_true", help="the warm second plan: seconds, and whether it imported torch")
    ap.add_argument("--save", type=Path, help="--catalog: keep each run's JSON in this folder")
    ap.add_argument("--ids", help="--catalog: comma-separated catalog models only")
    ap.add_argument("--repeat", type=int, default=1, help="--catalog: runs of each model's baseline and cold plan, alternating (default 1)")
    ap.add_argument("--no-check", action="store_true", help="--second: skip the --no-cache run it compares with")
    a = ap.parse_args()
    if a.repeat < 1:
        ap.error("--repeat must be at least 1")
    if a.catalog and a.models:
        ap.error("--catalog takes its models from --ids")
    if (a.save or a.ids or a.repeat != 1) and not a.catalog:
        ap.error("--save, --ids and --repeat go with --catalog")
    if a.no_check and not a.second:
        ap.error("--no-check goes with --second")
    if a.second:
        second(a.models or DEFAULT, check=not a.no_check)
    elif a.catalog:
        catalog(a.save, a.ids.split(",") if a.ids else None, a.repeat)
    else:
        phases(a.models or DEFAULT, warm=a.warm)


if __name__ == "__main__":
    main()
