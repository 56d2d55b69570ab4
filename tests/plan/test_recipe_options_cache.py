"""The torch-1.x recipe options (kept gradients, reentrant checkpointing) key their
own simulations in the cache on disk, reach the report through the CLI, and a
cached answer says the same as a fresh one (tests/plan/test_sim_cache.py's pattern)."""

import json
import subprocess
import sys

import pytest

from neurarch.inputs import InputOptions
from neurarch.plan import memory
from neurarch.plan.train import TrainSetup


@pytest.fixture
def built(model):
    from neurarch.build import build
    from neurarch.inputs import plan_inputs
    from neurarch.sources import resolve

    source = resolve(model)
    b = build(source)
    return b, plan_inputs(b.model, b.config, InputOptions(seq_len=32), source.default_input_shape)


def sim(built, inputs, **kw):
    run = {k: kw.pop(k) for k in ("steady_only",) if k in kw}  # the rest is the recipe
    before = memory.simulations_run()
    mem, _ = memory.estimate_with_curve(built, inputs, TrainSetup(**kw), cache=True, **run)
    return mem, memory.simulations_run() > before


def test_each_recipe_option_misses_the_cache(built):
    b, inputs = built
    plain, ran = sim(b, inputs, mode="full", steady_only=True)
    assert ran
    assert sim(b, inputs, mode="full", steady_only=True) == (plain, False)
    kept, ran = sim(b, inputs, mode="full", steady_only=True, zero_grad_set_to_none=False)
    assert ran and kept.peak_tensor_bytes > plain.peak_tensor_bytes
    assert sim(b, inputs, mode="full", steady_only=True, zero_grad_set_to_none=False) == (kept, False)
    gc, ran = sim(b, inputs, mode="full", steady_only=True, grad_checkpointing=True)
    assert ran
    reentrant, ran = sim(b, inputs, mode="full", steady_only=True, grad_checkpointing=True, grad_checkpointing_reentrant=True)
    assert ran  # its own simulation, even where the figures agree
    assert sim(b, inputs, mode="full", steady_only=True, grad_checkpointing=True, grad_checkpointing_reentrant=True) == (reentrant, False)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "neurarch.cli", *args], capture_output=True, text=True, timeout=600, check=False)


def test_the_report_states_the_recipe_options(model):
    out = _cli(model, "--plan", "--modes", "full", "--seq-len", "32", "--no-verify", "--format", "json", "--grad-checkpointing", "--grad-checkpointing-reentrant", "--zero-grad-set-to-none", "false")
    assert out.returncode == 0, out.stderr
    a = json.loads(out.stdout)["memory"]["assumptions"]
    assert a["grad_checkpointing"] is True and a["grad_checkpointing_reentrant"] is True and a["zero_grad_set_to_none"] is False
    from neurarch.render import render
    from neurarch.report import Report

    text = " ".join(render(Report.model_validate_json(out.stdout), "text", color=False).split())  # unwrapped
    assert "gradient checkpointing (reentrant)" in text and "gradients kept between steps (zero_grad(set_to_none=False))" in text
    default = json.loads(_cli(model, "--plan", "--modes", "full", "--seq-len", "32", "--no-verify", "--format", "json").stdout)["memory"]["assumptions"]
    assert default["grad_checkpointing_reentrant"] is False and default["zero_grad_set_to_none"] is True


@pytest.mark.parametrize(
    "args,message",
    [
        (["--grad-checkpointing-reentrant"], "--grad-checkpointing-reentrant needs --grad-checkpointing"),
        (["--zero-grad-set-to-none", "maybe"], "--zero-grad-set-to-none: expected true or false"),
    ],
)
def test_bad_recipe_flags_are_one_line_errors(model, args, message):
    out = _cli(model, "--plan", *args)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert message in out.stderr.strip().splitlines()[-1]  # one line (after argparse's usage, for argparse's own errors)
