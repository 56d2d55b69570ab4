"""QLoRA's fake quantization: a layer of a shape already quantized gets clones of that one's tensors.

The reference is bitsandbytes quantizing every layer (``COPY_SAME_SHAPES`` off): the
tensors each layer holds (packed weight, absmax, code, offset, the double quantization's
absmax and code) have the same shapes, strides, dtypes and bytes, each its own storage in
both, none a constant; the states' other fields are equal; and a plan's QLoRA figures are
the same either way.
"""

from __future__ import annotations

import warnings

import pytest
from torch._subclasses import fake_tensor as ft

from neurarch.build import build_from_config
from neurarch.fake.convert import meta_copy, weights_to_fake
from neurarch.inputs import InputOptions, plan_inputs
from neurarch.plan.memory import estimate_with_curve, with_batch
from neurarch.plan.train import TrainSetup, adapters, prepare
from tiny_configs import LLAMA

SETUP = TrainSetup(mode="qlora", precision="bf16")


def _quantized(model):
    mode = ft.FakeTensorMode(allow_non_fake_inputs=True)
    weights_to_fake(model, mode)
    with warnings.catch_warnings(), mode:
        warnings.simplefilter("ignore")
        held = adapters.quantize_4bit(model)
    states = [m.weight.quant_state for m in model.modules() if hasattr(getattr(m, "weight", None), "quant_state")]
    return held, states


def _layout(held):
    return [(tuple(t.shape), t.stride(), t.dtype, t.untyped_storage().nbytes(), t.constant is None) for t in held]


def _fields(state):
    plain = {k: v for k, v in vars(state).items() if k not in ("absmax", "code", "offset", "state2")}
    inner = {k: v for k, v in vars(state.state2).items() if k not in ("absmax", "code")} if state.state2 is not None else None
    return plain, inner, tuple(state.offset.shape)


def test_clones_hold_what_bitsandbytes_makes(monkeypatch):
    built = build_from_config(dict(LLAMA, num_hidden_layers=3), "llama")
    fast_held, fast_states = _quantized(prepare(meta_copy(built.model), SETUP))
    monkeypatch.setattr(adapters, "COPY_SAME_SHAPES", False)
    slow_held, slow_states = _quantized(prepare(meta_copy(built.model), SETUP))
    assert len(fast_held) == len(slow_held) > 6 * 3 * 4  # several layers of each shape
    assert _layout(fast_held) == _layout(slow_held)
    for held in (fast_held, slow_held):
        assert len({t.untyped_storage()._cdata for t in held}) == len(held)  # no storage shared, in either
    assert [_fields(s) for s in fast_states] == [_fields(s) for s in slow_states]


@pytest.mark.parametrize("layers", [2, 6], ids=["whole", "cut"])
def test_a_qlora_plans_figures_are_the_same(layers, monkeypatch):
    def figures():
        built = build_from_config(dict(LLAMA, num_hidden_layers=layers), "llama")
        plan = plan_inputs(built.model, built.config, InputOptions(seq_len=16, batch=1))
        return [estimate_with_curve(built, with_batch(plan, b), SETUP, steady_only=b != 1, cache=False) for b in (1, 2, 5)]

    ft.FakeTensorMode.cache_clear()
    fast = figures()
    ft.FakeTensorMode.cache_clear()
    monkeypatch.setattr(adapters, "COPY_SAME_SHAPES", False)
    assert figures() == fast
