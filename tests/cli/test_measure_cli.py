"""`neurarch-trace measure`: a real CPU step beside the estimate."""

import json

from neurarch.cli import main
from tiny_configs import LLAMA_WIDE

# The shared 2-layer Llama with GQA (hidden 256, 8 heads, 2 KV heads, MLP 704, vocabulary 4,000:
# the hand count below reads these sizes), small enough for a real CPU step; a 512-position
# table is plenty at --seq-len 128.
TINY = dict(LLAMA_WIDE, max_position_embeddings=512)


def test_measure_puts_a_real_step_beside_the_estimate(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY))
    rc = main(["measure", str(cfg), "--seq-len", "128", "--precision", "fp32", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    # fp32 AdamW holds weights + grads + 2 moments = 16 bytes per parameter at least:
    # 2*4000*256 (embed + head) + 2 layers x (4*256*256 - 2*256*192 (GQA k,v) + 3*256*704) + norms.
    params = 2 * 4000 * 256 + 2 * (2 * 256 * 256 + 2 * 256 * 64 + 3 * 256 * 704 + 2 * 256) + 256
    assert out["measured_peak_bytes"] >= 16 * params
    # The simulation agrees with the real allocator within the published target (3 %).
    assert abs(out["error_pct"]) <= 3.0
    assert out["error_pct"] == round(100 * (out["estimated_peak_tensor_bytes"] - out["measured_peak_bytes"]) / out["measured_peak_bytes"], 3)


def test_measure_bad_options(capsys):
    assert main(["measure", "microsoft/resnet-18", "--steps", "0"]) == 2
    assert "--steps" in capsys.readouterr().err


def test_measure_takes_the_torch_1_recipe_flags(tmp_path, capsys):
    # Kept gradients and reentrant checkpointing reach the real step as well as the estimate.
    # At batch 4 x 256 tokens the activations outweigh AdamW's scratch, so the real step peaks
    # in forward/backward: with kept gradients the fp32 gradients (4 bytes per parameter) live
    # through it, and the measured peak rises by about that; the simulation agrees within 3 %.
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY))
    params = 2 * 4000 * 256 + 2 * (2 * 256 * 256 + 2 * 256 * 64 + 3 * 256 * 704 + 2 * 256) + 256
    peaks = {}
    for keep in ("true", "false"):
        assert main(["measure", str(cfg), "--batch", "4", "--seq-len", "256", "--precision", "fp32", "--format", "json", "--zero-grad-set-to-none", keep]) == 0
        out = json.loads(capsys.readouterr().out)
        assert abs(out["error_pct"]) <= 3.0
        peaks[keep] = out["measured_peak_bytes"]
    assert 0.5 * 4 * params <= peaks["false"] - peaks["true"] <= 4 * params + 2**20
    assert main(["measure", str(cfg), "--seq-len", "64", "--precision", "fp32", "--format", "json", "--grad-checkpointing", "--grad-checkpointing-reentrant"]) == 0
    assert abs(json.loads(capsys.readouterr().out)["error_pct"]) <= 3.0
    assert main(["measure", str(cfg), "--grad-checkpointing-reentrant"]) == 2
    assert "--grad-checkpointing" in capsys.readouterr().err


def test_measure_the_trainers_adafactor(tmp_path, capsys):
    # optim="adafactor" in the Trainer is transformers' own Adafactor (a per-parameter loop, factored
    # second moments, no first moment): the simulation of it agrees with a real CPU step within 3 %,
    # and its state is far below AdamW's two fp32 moments (8 bytes a parameter) on the same model.
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY))
    peaks = {}
    for opt in ("adafactor-trainer", "adamw"):
        assert main(["measure", str(cfg), "--seq-len", "64", "--precision", "fp32", "--format", "json", "--optimizer", opt]) == 0
        out = json.loads(capsys.readouterr().out)
        assert abs(out["error_pct"]) <= 3.0, out
        peaks[opt] = out["measured_peak_bytes"]
    params = 2 * 4000 * 256 + 2 * (2 * 256 * 256 + 2 * 256 * 64 + 3 * 256 * 704 + 2 * 256) + 256
    assert peaks["adamw"] - peaks["adafactor-trainer"] >= 0.9 * 8 * params - 4 * params  # AdamW's moments, less at most a gradient-sized scratch
