"""The layer table of a deep model from two cut traces (neurarch.trace.cut), against the whole trace.

Each test traces the same model twice, whole and with its layer list offered for
cutting, and asserts the same table (rows, names, types, shapes, parameters, calls),
the same parameters without a gradient and the same output shape; and, by counting
the calls that reach a late layer, which of the two paths ran: a model the cut cannot
show exactly is traced whole.
"""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from neurarch.build import BuiltModel, build_from_config
from neurarch.inputs import InputOptions, InputPlan, TensorSpec, plan_inputs
from neurarch.pipeline import CUT_TRACE_UNITS, _repeats
from neurarch.trace import trace
from neurarch.trace.cut import Repeats
from neurarch.trace.structure import build_structure
from tiny_configs import LLAMA, bart, clip, t5


def _table(model: nn.Module, plan: InputPlan, repeats: Repeats | None) -> tuple:
    r = trace(model, plan, repeats=repeats)
    s = build_structure(model, r.recorder.events, None, r.unused_parameters)
    return s.model_dump(), r.output_shape, r.forward.ok, r.backward.ok


def _calls(module: nn.Module) -> list[int]:
    n = [0]
    module.register_forward_pre_hook(lambda *_: n.__setitem__(0, n[0] + 1))
    return n


def _llama(layers: int) -> tuple[BuiltModel, InputPlan]:
    built = build_from_config(dict(LLAMA, num_hidden_layers=layers), "test")
    return built, plan_inputs(built.model, built.config, InputOptions(batch=2, seq_len=16))


def test_a_deep_llama_from_two_cut_traces_is_its_whole_trace():
    built, plan = _llama(10)
    whole = _table(built.model, plan, None)
    built2, plan2 = _llama(10)
    rep = Repeats("model.layers", 1, 10)
    late = _calls(built2.model.model.layers[7])
    cut = _table(built2.model, plan2, rep)
    assert late[0] == 0  # layer 7 never ran: its rows were read off layer 2's
    assert cut == whole
    rows = whole[0]["nodes"]
    assert sum(n["type"] == "Grouped-Query Attention" for n in rows) == 10
    assert rows[-1]["output_shape"] == [16, 1000]
    assert len(built2.model.model.layers) == 10  # the list is whole again


def test_the_pipeline_offers_the_cut_only_for_deep_plain_stacks():
    assert _repeats(_llama(CUT_TRACE_UNITS)[0].model) == (Repeats("model.layers", 1, CUT_TRACE_UNITS),)
    assert _repeats(_llama(CUT_TRACE_UNITS - 1)[0].model) == ()  # too shallow to gain


BART = bart(9)


def _two_stacks(cfg: dict) -> tuple[BuiltModel, InputPlan]:
    built = build_from_config(dict(cfg), "test")
    return built, plan_inputs(built.model, built.config, InputOptions(batch=2, seq_len=16))


# T5's first block of each stack holds the relative position bias every later block reads: a special first layer.
T5 = t5(9)


@pytest.mark.parametrize(
    "cfg,lists,head",
    [
        (BART, ("model.decoder.layers", "model.encoder.layers"), 0),  # a decoder reading its encoder's output
        (clip(9), ("vision_model.encoder.layers", "text_model.encoder.layers"), 0),  # two towers side by side
        (T5, ("decoder.block", "encoder.block"), 1),  # each after its special first block
    ],
)
def test_two_layer_lists_that_repeat_as_often_are_cut_together_and_give_the_whole_trace(cfg, lists, head):
    built, plan = _two_stacks(cfg)
    whole = _table(built.model, plan, None)
    built2, plan2 = _two_stacks(cfg)
    reps = _repeats(built2.model)
    assert tuple(r.path for r in reps) == lists and all(r.head == head and r.head + r.units == 9 for r in reps)
    late = [_calls(built2.model.get_submodule(path)[k]) for path in lists for k in (4, 8)]
    cut = _table(built2.model, plan2, reps)
    assert [n[0] for n in late] == [0, 0, 0, 0]  # neither list's later layers ran
    assert cut == whole
    rows = whole[0]["nodes"]
    for path in lists:  # every layer of both lists has its own rows, in order
        layers = [int(n["name"][len(path) + 1 :].split(".")[0]) for n in rows if n["name"].startswith(path + ".")]
        assert list(dict.fromkeys(layers)) == list(range(9))


def test_lists_that_repeat_a_different_number_of_times_are_not_cut_together():
    built, plan = _two_stacks(dict(BART, encoder_layers=8))
    assert _repeats(built.model) == (Repeats("model.decoder.layers", 1, 9),)  # the decoder's alone, as the planner's stack
    whole = _table(built.model, plan, None)
    built2, plan2 = _two_stacks(dict(BART, encoder_layers=8))
    late_encoder = _calls(built2.model.model.encoder.layers[7])
    late_decoder = _calls(built2.model.model.decoder.layers[8])
    assert _table(built2.model, plan2, _repeats(built2.model)) == whole
    assert late_decoder[0] == 0 and late_encoder[0] == 2  # the encoder ran whole in both cut traces


class _Block(nn.Module):
    def __init__(self, unused: bool = False):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.spare = nn.Linear(8, 8) if unused else None  # built, never called: no gradient

    def forward(self, x):
        return x + torch.relu(self.fc(x))


class _Net(nn.Module):
    def __init__(self, n: int = 9, unused: bool = False, norm_each: bool = False):
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.layers = nn.ModuleList(_Block(unused) for _ in range(n))
        self.norm = nn.LayerNorm(8)
        self.norm_each = norm_each
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        h = self.inp(x)
        for layer in self.layers:
            h = layer(h)
            if self.norm_each:  # a module outside the list, called once per layer
                h = self.norm(h)
        return self.head(self.norm(h))


def _net(**kw) -> tuple[nn.Module, InputPlan]:
    with torch.device("meta"):
        model = _Net(**kw)
    return model, InputPlan([TensorSpec("x", (2, 4))], main="x", batch=2)


@pytest.mark.parametrize("unused", [False, True])
def test_unused_parameters_in_every_layer_are_listed_as_a_whole_trace_lists_them(unused):
    model, plan = _net(unused=unused)
    whole = _table(model, plan, None)
    model2, plan2 = _net(unused=unused)
    late = _calls(model2.layers[8])
    assert _table(model2, plan2, Repeats("layers", 1, 9)) == whole
    assert late[0] == 0
    spare = [f"layers.{i}.spare.{w}" for i in range(9) for w in ("weight", "bias")]
    assert whole[0]["unused_parameters"] == (spare if unused else [])


def test_a_module_called_once_per_layer_from_outside_the_list_is_traced_whole():
    model, plan = _net(norm_each=True)
    whole = _table(model, plan, None)
    model2, plan2 = _net(norm_each=True)
    late = _calls(model2.layers[8])
    got = _table(model2, plan2, Repeats("layers", 1, 9))
    assert late[0] == 1  # the cut traces did not show it: traced whole
    assert got == whole
    norm = next(n for n in whole[0]["nodes"] if n["name"] == "norm")
    assert norm["calls"] == 10  # once per layer and once before the head


def test_a_layout_that_fails_cut_falls_back_to_the_whole_trace_and_its_alternatives():
    from neurarch.inputs.types import Alternative

    def plan() -> InputPlan:  # 5 features first: the input layer takes 4, so the alternative's layout runs
        return InputPlan([TensorSpec("x", (2, 5))], main="x", batch=2, alternatives=[Alternative([TensorSpec("x", (2, 4))], "four features")])

    model, p = _net()[0], plan()
    whole = _table(model, p, None)
    model2, p2 = _net()[0], plan()
    late = _calls(model2.layers[8])
    got = _table(model2, p2, Repeats("layers", 1, 9))
    assert late[0] == 1  # traced whole, once: on the alternative
    assert got == whole and whole[2] and whole[3]  # both passes ran, on the alternative
    assert p2.how == p.how == ["four features"]


class _SlowBlock(_Block):
    calls = 0

    def forward(self, x):
        _SlowBlock.calls += 1
        if _SlowBlock.calls == 1:
            time.sleep(60)  # the time limit fires in here, in the first cut trace's first block
        return super().forward(x)


def test_a_time_limit_that_fires_in_a_cut_trace_ends_the_trace_at_once():
    from neurarch.errors import TraceTimeout
    from neurarch.jobs import time_limit

    model, plan = _net()
    model.layers = nn.ModuleList(_SlowBlock() for _ in range(9)).to("meta")
    _SlowBlock.calls = 0
    with pytest.raises(TraceTimeout, match="took longer than 2 s"):
        with time_limit(2, "the trace"):
            trace(model, plan, repeats=Repeats("layers", 1, 9))
    # Only the first block had run.  Caught as a failed cut pass, the limit would have let the
    # whole model be traced after it before its error (10 calls in all).
    assert _SlowBlock.calls == 1
    assert len(model.layers) == 9  # the list is whole again
