"""Do two commits print the same plan?  ``--plan --format json`` of catalog models, old against new.

    python benchmarks/snapshot_diff.py 306992e HEAD                      # the default models and recipes
    python benchmarks/snapshot_diff.py 306992e HEAD --catalog            # every bundled catalog model
    python benchmarks/snapshot_diff.py 306992e WORKTREE --models gpt2    # the working tree's src/ as the new side
    python benchmarks/snapshot_diff.py 306992e HEAD --save DIR           # keep both sides' JSON in DIR
    python benchmarks/snapshot_diff.py 306992e HEAD --catalog --old-from DIR   # the old side read from an earlier --save
    python benchmarks/snapshot_diff.py 306992e HEAD --case "gpt2 --optimizer adamw-8bit"   # a recipe of your own (repeatable)
    python benchmarks/snapshot_diff.py 306992e HEAD --models t5-small --rel 1e-12   # floats equal within a relative 1e-12

Each side's ``src/`` is exported (``git archive``; ``WORKTREE`` is this checkout's
``src/`` as it is on disk) and every case runs as a fresh process with
``PYTHONPATH`` at that tree and an empty ``NEURARCH_CACHE_DIR`` of its own, so
nothing is read from an earlier run's cache (``--old-from`` reads the old side's
reports from an earlier ``--save`` of the same cases and old commit instead of
running them again: half the time).  The two JSON reports are compared
after dropping what says how long a run took or which version made it (every
key named ``seconds`` or ``tool``).  Prints one line per case and the count of
identical ones; exits 1 when any case differs, and prints the first lines
that do.  With ``--rel``, a case whose reports differ is also compared field by
field: every number within that relative difference of the old one, and the
fields that differ otherwise (texts, counts, shapes) named.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# The default models, and recipes that move other code paths (checkpointing and a
# longer sequence, a task head with a fused optimizer, an encoder-decoder in fp32,
# accumulation with eager attention, an input batch above 1 with Adam and with SGD, and in a model simulated whole).
MODELS = ["gpt2", "meta-llama/Llama-3.2-1B-Instruct", "bert-base-uncased", "t5-small", "facebook/bart-large-cnn", "microsoft/resnet-50"]
RECIPES = [
    ["meta-llama/Llama-3.2-1B-Instruct", "--grad-checkpointing", "--seq-len", "1024"],
    ["bert-base-uncased", "--task", "seq-cls", "--num-labels", "3", "--optimizer", "adamw-fused"],
    ["t5-small", "--decoder-seq-len", "128", "--precision", "fp32"],
    ["gpt2", "--grad-accumulation", "4", "--attn-implementation", "eager"],
    ["meta-llama/Llama-3.2-1B-Instruct", "--batch", "4"],
    ["t5-small", "--batch", "3", "--optimizer", "sgd"],
    ["microsoft/resnet-50", "--batch", "8"],
]
DROPPED = ("seconds", "tool")


def export(rev: str, into: Path) -> Path:
    if rev == "WORKTREE":
        return ROOT / "src"
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def _drop(x):
    if isinstance(x, dict):
        return {k: _drop(v) for k, v in x.items() if k not in DROPPED}
    if isinstance(x, list):
        return [_drop(v) for v in x]
    return x


def plan_json(src: Path, args: list[str]) -> tuple[str, str]:
    """The report of one case, timings dropped, as indented JSON; or an error line."""
    env = dict(os.environ, PYTHONPATH=str(src), NEURARCH_CACHE_DIR=tempfile.mkdtemp(prefix="neurarch-snap-"))
    out = subprocess.run([sys.executable, "-m", "neurarch.cli", *args, "--plan", "--format", "json"], capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
    if out.returncode != 0:
        return "", f"exit {out.returncode}: {(out.stderr.strip().splitlines() or [''])[-1]}"
    return json.dumps(_drop(json.loads(out.stdout)), indent=1, sort_keys=True), ""


def saved(folder: str, i: int, name: str) -> tuple[str, str]:
    """The old side of case ``i`` as an earlier ``--save`` wrote it (``// name`` first, then the JSON or the error line)."""
    head, _, text = (Path(folder) / f"{i:02d}-old.json").read_text().partition("\n")
    if head != f"// {name}":
        sys.exit(f"{folder} holds another case at {i}: {head[3:]!r}, not {name!r}")
    text = text.rstrip("\n")
    return (text, "") if text.startswith("{") else ("", text)


def _walk(a, b, path: str, out: dict) -> None:
    """Collect how two reports differ: the largest relative difference of a float and where,
    and the paths of every other difference."""
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        for k in a:
            _walk(a[k], b[k], f"{path}.{k}" if path else k, out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _walk(x, y, f"{path}[{i}]", out)
    elif isinstance(a, float) and isinstance(b, float):
        rel = abs(a - b) / max(abs(a), abs(b)) if a != b else 0.0
        if rel > out["rel"][0]:
            out["rel"] = (rel, path)
    elif a != b:
        out["other"].append(path)


def within(j_old: str, j_new: str, tol: float) -> tuple[bool, str]:
    """Whether two reports are the same but for floats within ``tol`` of each other (relative), and how they differ."""
    out: dict = {"rel": (0.0, ""), "other": []}
    _walk(json.loads(j_old), json.loads(j_new), "", out)
    rel, where = out["rel"]
    ok = rel <= tol and not out["other"]
    text = f"numbers within {tol:g} (largest relative difference {rel:.1e}{' at ' + where if where else ''})" if rel <= tol else f"a number off by {rel:.1e} (relative) at {where}"
    if out["other"]:
        text += "; other fields differ: " + ", ".join(out["other"][:6]) + (f" and {len(out['other']) - 6} more" if len(out["other"]) > 6 else "")
    return ok, text


def catalog_ids(src: Path) -> list[str]:
    code = "from neurarch.sources.catalog import entries; print('\\n'.join(sorted(entries())))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(src)), check=True)
    return out.stdout.split()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new", help="a commit, or WORKTREE for this checkout's src/ as it is")
    ap.add_argument("--models", default="", help="comma-separated model ids instead of the defaults (no recipes)")
    ap.add_argument("--catalog", action="store_true", help="every bundled catalog model (no recipes)")
    ap.add_argument(
        "--case", action="append", default=[], metavar="'MODEL OPTIONS'", help="a model and the plan's options, as on the command line (repeatable; with --models or --catalog: after them)"
    )
    ap.add_argument("--save", default="", help="a folder to keep both sides' JSON in")
    ap.add_argument("--rel", type=float, default=None, help="also compare differing reports field by field: numbers within this relative difference count as the same")
    ap.add_argument("--old-from", default="", help="a folder an earlier --save of the same cases and old commit wrote: the old side read from it")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="neurarch-snap-trees-") as tmp:
        old, new = export(a.old, Path(tmp) / "old"), export(a.new, Path(tmp) / "new")
        own = [shlex.split(c) for c in a.case]
        if any(not c for c in own):
            ap.error("--case: a model id first, then the options")
        if a.catalog:
            cases = [[m] for m in catalog_ids(new)] + own
        elif a.models:
            cases = [[m] for m in a.models.split(",") if m] + own
        else:
            cases = own or [[m] for m in MODELS] + RECIPES
        same = close = 0
        for i, args in enumerate(cases):
            name = " ".join(args)
            (j_old, e_old), (j_new, e_new) = saved(a.old_from, i, name) if a.old_from else plan_json(old, args), plan_json(new, args)
            if a.save:
                for side, text in (("old", j_old or e_old), ("new", j_new or e_new)):
                    path = Path(a.save) / f"{i:02d}-{side}.json"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(f"// {name}\n{text}\n")
            if e_old or e_new:
                print(f"{name}: error (old: {e_old or 'ok'}; new: {e_new or 'ok'})", flush=True)
                same += e_old == e_new
                continue
            if j_old == j_new:
                same += 1
                print(f"{name}: identical", flush=True)
                continue
            if a.rel is not None:
                ok, how = within(j_old, j_new, a.rel)
                print(f"{name}: {'same within --rel' if ok else 'DIFFERENT'}: {how}", flush=True)
                close += ok
                continue
            print(f"{name}: DIFFERENT", flush=True)
            diff = difflib.unified_diff(j_old.splitlines(), j_new.splitlines(), a.old, a.new, lineterm="", n=1)
            for line in list(diff)[:40]:
                print("    " + line)
        print(f"\n{same} of {len(cases)} identical ({a.old} against {a.new})" + (f"; {close} more the same within --rel {a.rel:g} but for the fields named" if a.rel is not None else ""))
        sys.exit(0 if same == len(cases) else 1)


if __name__ == "__main__":
    main()
