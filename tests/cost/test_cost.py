"""Time and cost: FLOPs against independent formulas, the roofline against
hand arithmetic, and bad options."""

import math

import pytest

from neurarch import Options, analyze
from neurarch.cards import Card
from neurarch.cli import main
from neurarch.cost.counter import OpRecord
from neurarch.cost.estimate import ADAMW_BYTES_PER_PARAM, BANDWIDTH_EFFICIENCY, COMPUTE_EFFICIENCY, LAUNCH_SECONDS, StepWork, step_time
from neurarch.inputs import InputOptions
from neurarch.pipeline import CostOptions


def _cost(model_id, seq_len=None, **kw):
    return analyze(model_id, Options(inputs=InputOptions(seq_len=seq_len), cost=CostOptions(**kw)))


def test_llama_flops_per_token_is_6n_plus_attention():
    # Kaplan et al. 2020 / PaLM: training FLOPs per token = 6 N + 12 L s d
    # (N: parameters in matmuls; L layers, s tokens, d width).  Llama-3.2-1B:
    # N = 1,235,814,400 minus 33 RMSNorm weights of 2,048; L = 16, d = 2048.
    # At s = 2048 the attention term is 12*16*2048*2048 = 805M per token
    # (11 % of the total): a counter that counts SDPA as zero misses it.
    # torch's SDPA backward formula also counts the recomputed score product
    # (2 L s d more: flash kernels do recompute it), so the documented
    # tolerance against 6N + 12Lsd is 2 %, and 6N + 14Lsd is met to 0.1 %.
    s = 2048
    r = _cost("meta-llama/Llama-3.2-1B-Instruct", seq_len=s, tokens=10**6)
    n_matmul = 1_235_814_400 - 33 * 2048
    expected = 6 * n_matmul + 12 * 16 * s * 2048
    assert r.cost.flops_per_token == r.cost.flops_per_sample // s
    assert abs(r.cost.flops_per_token / expected - 1) < 0.02
    assert abs(r.cost.flops_per_token / (6 * n_matmul + 14 * 16 * s * 2048) - 1) < 0.001
    without_attention = 6 * n_matmul
    assert r.cost.flops_per_token / without_attention > 1.10


def test_resnet50_forward_flops_match_torchvision_published_ops():
    # torchvision publishes ResNet-50 at 4.089 GFLOPS (multiply-adds) per
    # 224x224 image: 8.178 GFLOP forward.  The backward pass is about twice the
    # forward (input and weight gradients), minus the stem conv's input gradient.
    r = _cost("microsoft/resnet-50")
    per_sample = r.cost.flops_per_sample
    assert 2.9 * 8.178e9 < per_sample < 3.0 * 8.178e9


def test_sdpa_counted_on_a_vit():
    # ViT-B/16 at 224: 197 tokens, 12 layers of d=768.  Attention FLOPs per
    # sample (fwd 4 s^2 d L, full) = 4*197^2*768*12 = 1.43 GFLOP: the total
    # must exceed the matmul-only 6 * N_linear * tokens by about that x 3.5.
    r = _cost("google/vit-base-patch16-224")
    n_linear = 12 * (4 * 768 * 768 + 2 * 768 * 3072) + 768 * 1000  # q,k,v,o + mlp; head on CLS only
    matmul_only = 6 * 12 * (4 * 768 * 768 + 2 * 768 * 3072) * 197 + 6 * 768 * 1000
    attention_fwd = 4 * 197**2 * 768 * 12
    assert n_linear > 0
    assert r.cost.flops_per_sample > matmul_only + 3 * attention_fwd


def test_roofline_by_hand():
    card = Card("X", 10, None, dense_bf16_tflops=100.0, fp32_tflops=10.0, bf16=True, bandwidth_gb_s=1000.0, usd_per_hour=2.0)
    # One matmul: 1e12 FLOPs, 1e9 bytes; one element-wise op: 0 FLOPs, 4e9 bytes.
    # batch 2 and 3 records equal: work independent of batch.
    ops = [OpRecord("aten.mm", "forward", 10**12, 10**9, True), OpRecord("aten.add", "forward", 0, 4 * 10**9, False)]
    work = StepWork(ops, ops, set())
    t, share, bound = step_time(work, 2, card, "bf16-mixed", trainable=10**6)
    mm = max(1e12 / (100e12 * COMPUTE_EFFICIENCY), 1e9 / (1000e9 * BANDWIDTH_EFFICIENCY))  # 12.5 ms compute
    add = 4e9 / (1000e9 * BANDWIDTH_EFFICIENCY)  # 4.44 ms memory
    opt = 10**6 * ADAMW_BYTES_PER_PARAM / (1000e9 * BANDWIDTH_EFFICIENCY)
    assert math.isclose(t, mm + add + 2 * LAUNCH_SECONDS + opt, rel_tol=1e-12)
    assert bound == "compute" and math.isclose(share, (mm + LAUNCH_SECONDS) / t)
    # fp32 uses the fp32 rate: 1e12 / (10e12 * 0.8) = 125 ms.
    t32, _, _ = step_time(work, 2, card, "fp32", trainable=0)
    assert math.isclose(t32, 1e12 / (10e12 * COMPUTE_EFFICIENCY) + add + 2 * LAUNCH_SECONDS)


def test_run_arithmetic_and_marks():
    r = _cost("microsoft/resnet-18", epochs=2, samples=1000, batch=10, card="A100-40GB")
    rows = {c.name: c for c in r.cost.cards}
    a100 = rows["A100-40GB"]
    assert a100.steps == 200  # ceil(2 * 1000 / 10)
    assert math.isclose(a100.run_hours, 200 * a100.step_seconds / 3600)
    assert math.isclose(a100.usd, a100.run_hours * 1.48)  # Lambda price in cards.tsv
    assert r.cost.headline.card == "A100-40GB" and r.cost.headline.usd == a100.usd
    priced = [c for c in r.cost.cards if c.usd is not None]
    assert r.cost.cheapest == min(priced, key=lambda c: c.usd).name
    # T4 has no bf16: not priced at bf16-mixed, said so.
    assert rows["T4"].usd is None and "bf16" in rows["T4"].note


def test_price_override_and_custom_card(capsys):
    rc = main(["microsoft/resnet-18", "--cost", "--price", "A10G=2.012", "--card", "Mine:48", "--format", "json"])
    out = capsys.readouterr().out
    import json

    doc = json.loads(out)
    rows = {c["name"]: c for c in doc["cost"]["cards"]}
    assert rc == 0
    assert math.isclose(rows["A10G"]["usd"], rows["A10G"]["run_hours"] * 2.012)
    # A custom card has memory only: no rate, no time.
    assert rows["Mine"]["step_seconds"] is None


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--cost", "--epochs", "0"], "--epochs"),
        (["--cost", "--samples", "-5"], "--samples"),
        (["--cost", "--card", "Z9000"], "unknown card"),
        (["--cost", "--price", "A10G=abc"], "not a number"),
        (["--cost", "--price", "A10G"], "--price"),
        (["--cost", "--precision", "fp8"], "--precision"),
        (["--tokens", "100"], "--cost"),
    ],
)
def test_bad_cost_options(capsys, argv, needle):
    rc = main(["microsoft/resnet-18", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1


def _counted_cut_and_whole(cfg: dict, model_type: str, seq_len: int):
    """The model's step counted cut (the default) and counted whole, on one traced model."""
    from neurarch.build import build_from_config
    from neurarch.cost.estimate import count_step
    from neurarch.inputs import plan_inputs
    from neurarch.trace.run import trace

    built = build_from_config(cfg, model_type)
    opts = InputOptions(seq_len=seq_len)
    trace(built.model, plan_inputs(built.model, built.config, opts))  # moves the model to fake tensors
    return count_step(built.model, built.config, opts, "bf16-mixed"), count_step(built.model, built.config, opts, "bf16-mixed", cut_depth=False)


def _same_work(cut, whole) -> None:
    """The same FLOPs and every card's step time at small and large batches, cut or whole."""
    from neurarch.cards import builtin_cards

    for b in (1, 7, 64):
        assert cut.flops(b) == pytest.approx(whole.flops(b), rel=1e-12)
        for card in builtin_cards():
            t_cut, t_whole = step_time(cut, b, card, "bf16-mixed", 10**6), step_time(whole, b, card, "bf16-mixed", 10**6)
            if t_whole is None:
                assert t_cut is None
                continue
            assert t_cut[0] == pytest.approx(t_whole[0], rel=1e-9)
            assert t_cut[1] == pytest.approx(t_whole[1], rel=1e-9)


def test_deep_model_counted_cut_equals_counted_whole():
    # A deep model's step is counted with its layer stack cut to 2 and 3 repeats
    # and extrapolated; the reference is the same model counted whole.
    cfg = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=64, intermediate_size=128, num_hidden_layers=7, num_attention_heads=4, num_key_value_heads=2, vocab_size=1000)
    cut, whole = _counted_cut_and_whole(cfg, "llama", 32)
    assert cut.method.startswith("traced with the layer stack") and whole.method == "traced whole"
    assert len(cut.ops1) < len(whole.ops1)
    _same_work(cut, whole)


def test_an_encoder_and_its_decoder_are_counted_cut_together():
    # Both stacks of an encoder-decoder repeat 6 times: the count cuts them together (as the memory
    # planner does), to 2 and 3 repeats each, and extrapolates; the reference is the model counted whole.
    cfg = dict(
        model_type="bart",
        architectures=["BartForConditionalGeneration"],
        d_model=32,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        vocab_size=100,
        max_position_embeddings=64,
    )
    cut, whole = _counted_cut_and_whole(cfg, "bart", 16)
    assert cut.method.startswith("traced with the layer stacks") and " and " in cut.method and whole.method == "traced whole"
    # Each cut run holds 2 or 3 of the 6 encoder and 6 decoder layers: fewer ops than the whole model's.
    assert len(cut.ops1) < len(whole.ops1)
    _same_work(cut, whole)
