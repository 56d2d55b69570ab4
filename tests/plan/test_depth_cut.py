"""The cut-depth shortcut (neurarch.plan.depth) must give what simulating the whole model gives.

The reference in every test is an independent whole simulation of the same
model (``cut_depth=False``): the shortcut runs two models cut to a few layers
and extrapolates, so any drift shows as a difference in bytes, phase or module.
"""

from __future__ import annotations

import pytest

from neurarch.build import build_from_config
from neurarch.inputs import InputOptions, plan_inputs
from neurarch.plan import depth
from neurarch.plan.fit import batch_from_curves
from neurarch.plan.memory import Curve, estimate, stack_of
from tiny_configs import BERT as TINY_BERT
from tiny_configs import LLAMA as TINY_LLAMA
from tiny_configs import bart, clip, t5

# The shared tiny models with deeper stacks (same-shape blocks worth cutting).
LLAMA = dict(TINY_LLAMA, num_hidden_layers=7)
GEMMA2 = dict(
    model_type="gemma2",
    architectures=["Gemma2ForCausalLM"],
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=9,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=1000,
    sliding_window=8,
)
QWEN2_MOE = dict(
    model_type="qwen2_moe",
    architectures=["Qwen2MoeForCausalLM"],
    hidden_size=64,
    intermediate_size=128,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=64,
    num_experts=4,
    num_experts_per_tok=2,
    num_hidden_layers=6,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=1000,
)
VIT = dict(model_type="vit", architectures=["ViTForImageClassification"], hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4, image_size=64, patch_size=16)
BERT = dict(TINY_BERT, num_hidden_layers=6)
T5 = t5(6)

FIELDS = ("peak_tensor_bytes", "peak_bytes", "first_step_peak_tensor_bytes", "breakdown", "trainable_parameters", "kv_cache_bytes", "phase", "module", "step")


def _built(cfg, name):
    built = build_from_config(dict(cfg), name)
    return built, plan_inputs(built.model, built.config, InputOptions(seq_len=24, batch=2))


@pytest.mark.parametrize(
    "cfg,mode,precision",
    [
        (LLAMA, "full", "bf16-mixed"),
        (LLAMA, "lora", "fp32"),
        (LLAMA, "inference", "bf16-mixed"),
        (GEMMA2, "full", "bf16-mixed"),  # sliding / global layers alternate: repeats of 2 layers
        (QWEN2_MOE, "full", "fp32"),  # routed experts
        (VIT, "lora", "fp32"),
        (BERT, "inference", "fp32"),
        # A backbone returns the last layer's output: at 2 repeats the second layer's output
        # outlives the prefill, at the real depth it does not (the breakdown must not drift).
        (dict(BERT, architectures=["BertModel"]), "inference", "fp32"),
    ],
)
def test_cut_equals_whole(cfg, mode, precision):
    built, plan = _built(cfg, cfg["model_type"])
    whole = estimate(built, plan, mode, precision=precision, cut_depth=False)
    cut = estimate(built, plan, mode, precision=precision)
    assert any(n.startswith("simulated with the layer stack") for n in cut.notes), cut.notes
    for f in FIELDS:
        assert getattr(cut, f) == getattr(whole, f), f


def test_stack_period_and_head():
    built, _ = _built(GEMMA2, "gemma2")
    s = stack_of(built.model)
    assert (s.path, s.length, s.head, s.period, s.units, s.rest) == ("model.layers", 9, 0, 2, 4, 1)
    assert s.depth(2) == 5 and s.depth(3) == 7
    built, _ = _built(T5, "t5")
    s = stack_of(built.model)  # T5's first block alone holds the relative position bias
    assert s.head == 1 and s.period == 1 and s.length == 6


def test_stack_needs_enough_repeats():
    cfg = dict(LLAMA, num_hidden_layers=3)
    built, _ = _built(cfg, "llama")
    assert stack_of(built.model) is None


def test_layers_that_do_not_line_up_fall_back_to_whole():
    # T5's decoder blocks add their gradient for the encoder output into one
    # buffer in backward: the top block behaves unlike the others, the two cut
    # runs do not line up, and the whole model is simulated (and says so).
    built, plan = _built(T5, "t5")
    m = estimate(built, plan, "full", precision="fp32")
    assert any(n.startswith("simulated whole (the cut-depth shortcut did not apply") for n in m.notes), m.notes
    assert m.peak_tensor_bytes == estimate(built, plan, "full", precision="fp32", cut_depth=False).peak_tensor_bytes


def test_batch_from_curves_by_hand():
    # Two labels: a fixed 100 + 10/sample, and 40 + 30/sample.  Budget 400:
    # the first allows (400-100)/10 = 30, the second (400-40)/30 = 12 -> 12.
    a = Curve(1, {"x": 110, "y": 70})
    b = Curve(2, {"x": 120, "y": 100})
    assert batch_from_curves(a, b, 400) == 12
    assert batch_from_curves(a, b, 399) == 11
    assert batch_from_curves(a, Curve(2, {"x": 120}), 400) is None  # runs that do not line up
    assert batch_from_curves(a, Curve(2, {"x": 110, "y": 70}), 400, limit=999) == 999  # nothing grows


def test_line_int_refuses_fractions():
    assert depth.line_int(10, 16, 2, 3, 10) == 58
    with pytest.raises(depth.NotRepeating):
        depth.line_int(10, 15, 2, 4, 10)


@pytest.mark.parametrize(
    "cfg,mode,optimizer,cut",
    [
        (LLAMA, "full", "adamw", True),
        (LLAMA, "full", "adafactor", False),  # data-dependent .item() in its step
        (QWEN2_MOE, "lora", "adamw", True),
    ],
)
def test_steady_state_alone_equals_two_steps(cfg, mode, optimizer, cut):
    # The batch search simulates step 2 alone after a warm-up that makes the
    # optimizer state; the reference is the ordinary two-step simulation.
    from neurarch.plan.memory import estimate_with_curve
    from neurarch.plan.train import TrainSetup

    built, plan = _built(cfg, cfg["model_type"])
    setup = TrainSetup(mode=mode, optimizer=optimizer)
    two, c2 = estimate_with_curve(built, plan, setup, cut_depth=cut)
    one, c1 = estimate_with_curve(built, plan, setup, cut_depth=cut, steady_only=True)
    assert one.first_step_peak_tensor_bytes is None
    for f in ("peak_tensor_bytes", "peak_bytes", "breakdown", "phase", "module"):
        assert getattr(one, f) == getattr(two, f), f
    assert c1.values == c2.values


def test_autocast_weight_copies_are_flagged():
    # Under bf16 autocast every Linear weight is cast once per forward and the
    # copy is kept for backward: at the end of forward the flagged copies must be
    # exactly the Linear weights in bf16.  Hand count for LLAMA: per layer q 64x64,
    # k 64x32, v 64x32, o 64x64, gate/up 64x128, down 128x64 = 36,864; 7 layers;
    # lm_head 1000x64 = 64,000 -> 322,048 elements x 2 bytes.
    from neurarch.plan.memory import simulate
    from neurarch.plan.train import TrainSetup

    built, plan = _built(LLAMA, "llama")
    sim = simulate(built, plan, TrainSetup(mode="full", precision="bf16-mixed"))
    ev = sim.forward_end
    alive = sum(x.nbytes for x in sim.lives if x.weight_copy and x.start <= ev and (x.end is None or x.end > ev))
    assert alive == (7 * 36_864 + 64_000) * 2


def test_a_model_mostly_outside_its_stack_is_simulated_whole_after_the_first_cut():
    # T5's decoder and encoder stacks are cut together, but 5 repeats after a special first
    # block are too few: the two cut runs (3 and 4 blocks a stack) make more ops than one
    # whole run (6).  The first simulation uses the cut (and counts its ops); later ones
    # of that mode run the whole model.  The figures are the same either way; the
    # reference is cut_depth=False.
    from neurarch.plan import by_depth
    from neurarch.plan.memory import with_batch

    built, plan = _built(T5, "t5")
    first = estimate(built, plan, "inference", precision="fp32")
    assert any(n.startswith("simulated with the layer stacks `decoder.block`") for n in first.notes), first.notes
    sim = by_depth.simulate_by_depth(built, plan, by_depth.TrainSetup(mode="inference", precision="fp32"))
    a, b = sim.cut_ops
    assert a + (b - a) * (6 - 2) < a + b  # the whole model's ops by the runs' own per-repeat count
    later = estimate(built, with_batch(plan, 3), "inference", precision="fp32")
    assert not any(n.startswith("simulated with the layer stack") for n in later.notes), later.notes
    whole = estimate(built, with_batch(plan, 3), "inference", precision="fp32", cut_depth=False)
    for f in FIELDS:
        assert getattr(later, f) == getattr(whole, f), f


def test_a_deep_decoder_keeps_the_cut():
    from neurarch.plan.memory import with_batch

    built, plan = _built(LLAMA, "llama")
    for b in (2, 3):
        m = estimate(built, with_batch(plan, b), "full", precision="fp32")
        assert any(n.startswith("simulated with the layer stack") for n in m.notes), m.notes


# Two stacks that repeat as many times: an encoder beside its decoder, CLIP's two towers.
BART = bart(6)
CLIP = clip(5)


def test_stacks_that_repeat_as_often_are_found_together():
    built, _ = _built(BART, "bart")
    assert [(s.path, s.units) for s in depth.stacks_of(built.model)] == [("model.decoder.layers", 6), ("model.encoder.layers", 6)]
    built, _ = _built(CLIP, "clip")
    assert [(s.path, s.units) for s in depth.stacks_of(built.model)] == [("vision_model.encoder.layers", 5), ("text_model.encoder.layers", 5)]
    built, _ = _built(dict(BART, encoder_layers=5), "bart")  # not as many repeats: the larger stack alone
    assert [s.path for s in depth.stacks_of(built.model)] == ["model.decoder.layers"]
    built, _ = _built(LLAMA, "llama")
    assert [s.path for s in depth.stacks_of(built.model)] == ["model.layers"]


@pytest.mark.parametrize("cfg,mode,precision", [(CLIP, "full", "bf16-mixed"), (CLIP, "lora", "fp32"), (BART, "inference", "fp32")])
def test_two_stacks_cut_together_equal_whole(cfg, mode, precision):
    built, plan = _built(cfg, cfg["model_type"])
    whole = estimate(built, plan, mode, precision=precision, cut_depth=False)
    cut = estimate(built, plan, mode, precision=precision)
    assert any(n.startswith("simulated with the layer stacks") for n in cut.notes), cut.notes
    for f in FIELDS:
        assert getattr(cut, f) == getattr(whole, f), f
    if mode == "full":  # a pipeline's per-segment bytes: the text tower one segment, summed over its full depth
        from neurarch.plan.memory import estimate_with_curve
        from neurarch.plan.train import TrainSetup

        setup = TrainSetup(mode=mode, precision=precision)
        assert estimate_with_curve(built, plan, setup)[1].segments == estimate_with_curve(built, plan, setup, cut_depth=False)[1].segments


def test_a_decoder_reading_the_encoder_lines_up_at_three_and_four_repeats():
    # Every decoder layer adds its gradient for the encoder output into one buffer;
    # the last layer, first in backward, makes it.  At 2 repeats the second layer is
    # that last one, at 3 a middle one: the runs at 2 and 3 do not line up, those at
    # 3 and 4 (a middle second repeat in both) do, and equal the whole simulation.
    from neurarch.plan import by_depth

    built, plan = _built(BART, "bart")
    setup = by_depth.TrainSetup(mode="full", precision="fp32")
    with pytest.raises(depth.NotRepeating):
        by_depth.simulate_by_depth(built, plan, setup)
    cut = by_depth.simulate_by_depth(built, plan, setup, units=(3, 4))
    whole = by_depth.simulate_mode(built, plan, setup, cut_depth=False)
    for a, b in [(cut.peak, whole.peak), *zip(cut.step_peaks, whole.step_peaks, strict=True)]:
        assert (a.bytes, a.step, a.phase, a.module, a.breakdown) == (b.bytes, b.step, b.phase, b.module, b.breakdown)
    assert cut.rounded_bytes == whole.rounded_bytes
    assert cut.trainable_parameters == whole.trainable_parameters
    # A pipeline's per-segment bytes: the encoder's layers one segment, summed over its full depth.
    assert by_depth.segment_bytes(built.model, cut, cut.steady) == by_depth.segment_bytes(built.model, whole, whole.steady)


def test_three_and_four_repeats_only_where_they_cost_less_than_the_whole_model():
    from neurarch.plan import by_depth

    # 1,000 ops at 2 repeats, 1,300 at 3: 300 a repeat.  At 12 repeats the whole model is
    # 1,000 + 10 x 300 = 4,000 ops; runs at 3 and 4 repeats, 1,300 + 1,600 = 2,900.
    assert by_depth._later_is_cheaper((1000, 1300), 12)
    # At 6: 2,200 whole against 2,900.
    assert not by_depth._later_is_cheaper((1000, 1300), 6)


def test_an_encoder_decoder_in_training_starts_at_three_and_four_repeats(monkeypatch):
    # Its runs at 2 and 3 repeats cannot line up in training (above), so with stacks that repeat
    # often enough (8: 2 x 4) the first try is 3 and 4; inference keeps 2 and 3.  The figures
    # are the whole simulation's.
    from neurarch.plan import by_depth

    built, plan = _built(dict(BART, encoder_layers=8, decoder_layers=8), "bart")
    tried = []
    real = by_depth.simulate_by_depth

    def spy(*args, units=by_depth.CUT_UNITS, **kw):
        tried.append(units)
        return real(*args, units=units, **kw)

    monkeypatch.setattr(by_depth, "simulate_by_depth", spy)
    for mode, first in (("full", (3, 4)), ("inference", (2, 3))):
        tried.clear()
        cut = estimate(built, plan, mode, precision="fp32")
        assert tried == [first], (mode, tried)
        whole = estimate(built, plan, mode, precision="fp32", cut_depth=False)
        for f in FIELDS:
            assert getattr(cut, f) == getattr(whole, f), (mode, f)


MARIAN = dict(BART, model_type="marian", architectures=["MarianMTModel"], decoder_start_token_id=0, pad_token_id=0)


@pytest.mark.parametrize("cfg,mode", [(T5, "full"), (T5, "lora"), (BART, "full"), (dict(BART, encoder_layers=7, decoder_layers=7), "qlora"), (MARIAN, "full")])
def test_a_short_encoder_decoder_trains_simulated_whole_without_trying_a_cut(cfg, mode, monkeypatch):
    # Stacks that repeat 5 (T5: after a special first block), 6 or 7 times.  The premise, checked
    # on the real runs: cut to 2 and 3 repeats they do not line up in training.  And two runs at
    # 3 and 4 repeats hold 7 repeats beside the rest of the model twice, one whole run at most 7
    # beside it once.  So the mode goes straight to the whole model, with the same figures as a
    # simulation that never considers a cut (cut_depth=False), and says why.
    from neurarch.plan import by_depth
    from neurarch.plan.train import TrainSetup

    built, plan = _built(cfg, cfg["model_type"])
    setup = TrainSetup(mode=mode, precision="fp32")
    assert by_depth._short_encoder_decoder(built, setup)
    with pytest.raises(depth.NotRepeating):
        by_depth.simulate_by_depth(built, plan, setup, units=by_depth.CUT_UNITS)

    def no_cut(*a, **k):
        raise AssertionError("tried a cut")

    monkeypatch.setattr(by_depth, "simulate_by_depth", no_cut)
    fresh, _ = _built(cfg, cfg["model_type"])
    got = estimate(fresh, plan, mode, precision="fp32")
    assert f"simulated whole (the cut-depth shortcut did not apply: {by_depth.SHORT_ENCODER_DECODER})" in got.notes
    monkeypatch.undo()
    whole = estimate(built, plan, mode, precision="fp32", cut_depth=False)
    for f in FIELDS:
        assert getattr(got, f) == getattr(whole, f), f


def test_only_short_encoder_decoders_in_training_skip_the_cut():
    from neurarch.plan import by_depth
    from neurarch.plan.train import TrainSetup

    full, inference = TrainSetup(mode="full", precision="fp32"), TrainSetup(mode="inference", precision="fp32")
    t5, _ = _built(T5, "t5")
    assert not by_depth._short_encoder_decoder(t5, inference)  # inference cuts at 2 and 3 (test above)
    deep, _ = _built(dict(BART, encoder_layers=8, decoder_layers=8), "bart")
    assert not by_depth._short_encoder_decoder(deep, full)  # 8 repeats: 3 and 4 first
    llama, _ = _built(LLAMA, "llama")
    assert not by_depth._short_encoder_decoder(llama, full)
