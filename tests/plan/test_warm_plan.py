"""The report cache (neurarch.warm): a second plan that differs only in cards,
prices or the run's length answers without torch, and says what a cold plan says.

Every test has its own cache directory.  The yardstick is always an independent
run: the same options computed in a fresh cache directory with the cache off,
never the cache's own output.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from neurarch import Options, analyze, warm
from neurarch.inputs import InputOptions
from neurarch.pipeline import CostOptions, PlanOptions
from neurarch.plan import cache
from tiny_configs import LLAMA as TINY  # the model the shared `model` fixture (conftest) writes

SRC = str(Path(__file__).resolve().parents[2] / "src")
PLAN = ["--plan", "--modes", "full,inference", "--seq-len", "32", "--no-verify", "--format", "json"]
CHEAP = ["--card", "H100", "--price", "A10G=9.00", "--epochs", "2", "--samples", "1000"]

# The console command in a fresh process; afterwards, which of torch and transformers it imported.
RUN = """
import json, sys
sys.argv = ["neurarch-trace", *json.loads(sys.argv[1])]
from neurarch.cli import main
rc = main()
print("IMPORTED=" + json.dumps(sorted(m for m in ("torch", "transformers") if m in sys.modules)), file=sys.stderr)
sys.exit(rc)
"""


@pytest.fixture
def folder(model):
    return Path(model)  # conftest's tiny model folder, with its own cache directory


def cli(args: list[str], cache_dir: Path, out: Path, supervise: bool = False) -> list[str]:
    """Run neurarch-trace in a fresh process; returns the modules of torch/transformers it imported.
    Unsupervised, the model runs in that process (not in a child), so its imports show."""
    env = {**os.environ, "NEURARCH_CACHE_DIR": str(cache_dir), "PYTHONPATH": SRC, "NEURARCH_SUPERVISE": "1" if supervise else "0"}
    env.pop("NEURARCH_NO_CACHE", None)
    p = subprocess.run([sys.executable, "-c", RUN, json.dumps([*args, "-o", str(out)])], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("IMPORTED=")][-1]
    return json.loads(line.split("=", 1)[1])


def without_seconds(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if '"seconds"' not in ln]


def test_warm_plan_imports_no_torch_and_matches_an_independent_cold_run(folder, tmp_path):
    warm_dir, fresh_dir = tmp_path / "warm-cache", tmp_path / "fresh-cache"
    first = cli([str(folder), *PLAN], warm_dir, tmp_path / "cold.json")
    assert "torch" in first  # the cold plan builds and simulates
    assert list((warm_dir / "reports").glob("*/*.json"))
    second = cli([str(folder), *PLAN, *CHEAP], warm_dir, tmp_path / "warm.json")
    assert second == []  # neither torch nor transformers
    cli([str(folder), *PLAN, *CHEAP, "--no-cache"], fresh_dir, tmp_path / "ref.json", supervise=True)
    assert not (fresh_dir / "reports").exists()  # --no-cache stores nothing
    warm_text, ref_text = (tmp_path / "warm.json").read_text(), (tmp_path / "ref.json").read_text()
    assert without_seconds(warm_text) == without_seconds(ref_text)  # byte for byte, timings aside
    doc = json.loads(warm_text)
    assert doc["cost"]["headline"]["card"].startswith("H100") and doc["cost"]["assumptions"]["epochs"] == 2
    a10g = next(c for c in doc["cost"]["cards"] if c["name"] == "A10G")
    cold_a10g = next(c for c in json.loads((tmp_path / "cold.json").read_text())["cost"]["cards"] if c["name"] == "A10G")
    assert a10g["usd"] != cold_a10g["usd"]  # the new price and run length were applied, not the cold plan's copied


def opts(seq=32, modes=("full", "inference"), cost=None, precision="bf16-mixed", **plan):
    return Options(inputs=InputOptions(seq_len=seq), plan=PlanOptions(modes=modes, **plan), cost=cost, precision=precision, verify=False)


def test_each_option_that_reaches_the_simulation_misses(folder):
    spec = str(folder)
    cold = analyze(spec, opts())
    assert warm.lookup(spec, opts()) is not None
    assert warm.lookup(spec, opts(cost=CostOptions(card="H100", epochs=3, prices={"A10G": 5.0}))) is not None  # the cheap ones hit
    for other in (
        opts(seq=64),
        opts(precision="fp32", cost=CostOptions(precision="fp32")),
        opts(modes=("full",)),
        opts(modes=("full", "inference", "lora")),
        opts(attn_implementation="eager"),
        opts(lora_rank=8),
        opts(grad_checkpointing=True),
        opts(optimizer="sgd"),
    ):
        assert warm.key(spec, other) != warm.key(spec, opts())
        assert warm.lookup(spec, other) is None
    # the same file name with another config: a miss
    (folder / "config.json").write_text(json.dumps({**TINY, "intermediate_size": 256}))
    assert warm.lookup(spec, opts()) is None
    (folder / "config.json").write_text(json.dumps(TINY))
    assert warm.lookup(spec, opts()) is not None
    # no warm path: --no-cache, NEURARCH_NO_CACHE, remote code, Python files
    assert warm.key(spec, Options(plan=PlanOptions(), cache=False)) is None
    assert warm.key(spec, Options(plan=PlanOptions(), trust_remote_code=True)) is None
    assert warm.key("python:model.py:make", Options(plan=PlanOptions())) is None
    assert cold.memory is not None


def test_a_batch_never_simulated_runs_the_full_plan(folder, monkeypatch):
    spec = str(folder)
    analyze(spec, opts())
    # a small custom card needs its own check batches: not in the cache
    small = opts(cost=CostOptions(cards=("Tiny:2",)))
    before = dict(warm.STATS)
    assert warm.lookup(spec, small) is None
    assert warm.STATS["fallbacks"] == before["fallbacks"] + 1
    got = analyze(spec, small)
    monkeypatch.setenv("NEURARCH_CACHE_DIR", str(folder.parent / "fresh"))
    ref = analyze(spec, Options(**{**small.__dict__, "cache": False}))
    assert without_seconds(got.model_dump_json(indent=2)) == without_seconds(ref.model_dump_json(indent=2))
    assert any(c.name == "Tiny" and c.max_batch.get("full") for c in got.cards)


def test_a_corrupt_entry_is_removed_and_the_full_plan_runs(folder, monkeypatch):
    spec = str(folder)
    analyze(spec, opts())
    (path,) = (folder.parent / "cache" / "reports").glob("*/*.json")
    for junk in ("{not json", json.dumps({"key": path.stem, "value": {"modes": "?"}})):
        path.write_text(junk)
        assert warm.lookup(spec, opts()) is None
        assert not path.exists()  # removed
        analyze(spec, opts())  # stored again
        assert path.exists()
    again = warm.lookup(spec, opts())
    monkeypatch.setenv("NEURARCH_CACHE_DIR", str(folder.parent / "fresh"))
    ref = analyze(spec, Options(**{**opts().__dict__, "cache": False}))
    assert again is not None
    assert without_seconds(again.model_dump_json(indent=2)) == without_seconds(ref.model_dump_json(indent=2))


def test_the_size_cap_applies(folder, monkeypatch):
    monkeypatch.setenv("NEURARCH_CACHE_MAX_MB", "0")
    analyze(str(folder), opts())
    assert not list((folder.parent / "cache" / "reports").glob("*/*.json"))
    assert cache.max_bytes() == 0
