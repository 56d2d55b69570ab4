"""The console command's child holds cyclic garbage collection for its whole run.

Each case runs in a fresh Python process (a frozen heap would stay frozen in the
test process): the supervised child's function with a tiny config, checking that
collection was off while the model was built, stays off with the startup's
objects frozen once analyze has built it (the child ends with the plan), and that
the report is the one a process that never held collection makes; a hold that is
not for the whole run turns collection back on once built; and a library caller's
own setting (collection off, nothing frozen) is left alone.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tiny_configs import LLAMA

CHILD = r"""
import gc, json, sys
from neurarch.cli.trace import _analyze_in_child
from neurarch.inputs import prepare as prep
from neurarch.options import Options, PlanOptions, InputOptions
seen = {}
real = prep.prepare
def watch(*a, **k):
    seen["enabled while building"] = gc.isenabled()
    return real(*a, **k)
import neurarch.pipeline as pl
pl.prepare = watch
held = sys.argv[2] == "held"
opts = Options(inputs=InputOptions(seq_len=16), plan=PlanOptions(modes=("full",)))
if held:
    status, report = _analyze_in_child(sys.argv[1], opts)
else:
    report = pl.analyze(sys.argv[1], opts)
seen["enabled after"] = gc.isenabled()
seen["frozen"] = gc.get_freeze_count()
seen["memory"] = json.loads(report.model_dump_json())["memory"]
print(json.dumps(seen))
"""


def _run(config: str, how: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, config, how], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_child_holds_collection_until_built_then_freezes_and_the_figures_are_the_same(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURARCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("NEURARCH_NO_CACHE", "1")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(dict(LLAMA, num_hidden_layers=4)))
    held, plain = _run(str(config), "held"), _run(str(config), "plain")
    assert held["enabled while building"] is False and held["enabled after"] is False
    assert held["frozen"] > 100_000  # torch's and transformers' objects, out of later collections
    assert plain["enabled while building"] is True and plain["frozen"] == 0  # a library call changes nothing
    assert held["memory"] == plain["memory"] and held["memory"]


def test_a_library_callers_own_setting_is_left_alone():
    code = "import gc; gc.disable(); from neurarch.jobs import release_collection; release_collection(); print(gc.isenabled(), gc.get_freeze_count())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "0"]


def test_a_hold_not_for_the_whole_run_collects_again_once_released():
    code = (
        "import gc; from neurarch.jobs import hold_collection, release_collection; "
        "hold_collection(); a = gc.isenabled(); release_collection(); b = gc.isenabled(); "
        "hold_collection(whole_run=True); c = gc.isenabled(); release_collection(); "
        "print(a, b, c, gc.isenabled(), gc.get_freeze_count() > 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "True", "False", "False", "True"]


def test_no_collection_inside_the_block_and_as_before_after_it():
    import gc

    from neurarch.jobs import no_collection

    was = gc.isenabled()
    try:
        for before in (True, False):
            (gc.enable if before else gc.disable)()
            with no_collection():
                assert not gc.isenabled()
            assert gc.isenabled() is before
    finally:
        (gc.enable if was else gc.disable)()
