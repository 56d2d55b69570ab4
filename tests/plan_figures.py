"""A small plan's figures with one of neurarch's fake-tensor fast paths and without it.

The tests of :mod:`neurarch.fake.cachekey`, :mod:`neurarch.fake.views` and
:mod:`neurarch.fake.hits` each compare a plan made with their fast path against
one made with torch's own functions: the same 5-layer Llama, the same batches,
FakeTensor's cache emptied before each side.
"""

from __future__ import annotations

from torch._subclasses import fake_tensor as ft

from neurarch.build import build_from_config
from neurarch.inputs import InputOptions, plan_inputs
from neurarch.plan.memory import estimate_with_curve, with_batch
from tiny_configs import LLAMA


def llama_figures(setup) -> list:
    """A 5-layer Llama's memory figures at batches 2, 3 and 7 (input batch 2, sequence 24), no cache."""
    built = build_from_config(dict(LLAMA, num_hidden_layers=5), "llama")
    plan = plan_inputs(built.model, built.config, InputOptions(seq_len=24, batch=2))
    return [estimate_with_curve(built, with_batch(plan, b), setup, cache=False) for b in (2, 3, 7)]


def with_and_without(setup, turn_off) -> tuple[list, list]:
    """:func:`llama_figures` as the code runs it, then after ``turn_off()`` (which puts torch's
    function back in place of a fast path), FakeTensor's cache emptied before each."""
    ft.FakeTensorMode.cache_clear()
    fast = llama_figures(setup)
    ft.FakeTensorMode.cache_clear()
    turn_off()
    return fast, llama_figures(setup)
