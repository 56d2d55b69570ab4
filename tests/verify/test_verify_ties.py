"""untied-head-built-tied: a config file that unties the LM head, built tied by transformers.

A tiny T5 v1.1 layout (gated-GELU, 64-token vocabulary, d_model 16) saved with
``tie_word_embeddings: false``: transformers 5.x's T5Config ties T5's head
always, so the built model is short of the file's layout by one 64 x 16 head,
1,024 parameters (hand count).  The same config without the ``false``, and a
Llama whose ``false`` transformers honours, get no finding.
"""

from __future__ import annotations

import json

from neurarch import Options, analyze
from neurarch.options import InputOptions
from tiny_configs import LLAMA

T5_V11 = {
    "model_type": "t5",
    "architectures": ["T5ForConditionalGeneration"],
    "vocab_size": 64,
    "d_model": 16,
    "d_kv": 4,
    "d_ff": 32,
    "num_layers": 1,
    "num_decoder_layers": 1,
    "num_heads": 4,
    "feed_forward_proj": "gated-gelu",
    "decoder_start_token_id": 0,
    "tie_word_embeddings": False,
}


def _run(tmp_path, config):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    report = analyze(str(path), Options(inputs=InputOptions(seq_len=8), backward=False))
    return report, [f for f in report.findings if f.rule == "untied-head-built-tied"]


def test_fires_on_a_t5_v11_config_built_tied(tmp_path):
    report, found = _run(tmp_path, T5_V11)
    assert len(found) == 1
    f = found[0]
    assert f.severity == "warn" and f.node == "lm_head"
    assert "64 x 16 = 1,024 parameters" in f.message
    n = report.params.parameters
    assert f"({n:,} here)" in f.message and f"({n + 1024:,} in all)" in f.message
    assert "1,024 parameters of weights" in f.fix


def test_silent_when_the_config_does_not_untie(tmp_path):
    config = {k: v for k, v in T5_V11.items() if k != "tie_word_embeddings"}
    report, found = _run(tmp_path, config)
    assert not found
    assert any(s.startswith("untied-head-built-tied:") for s in report.verifier.skipped)


def test_silent_when_the_library_honours_the_untied_head(tmp_path):
    report, found = _run(tmp_path, LLAMA)  # tie_word_embeddings false: lm_head is its own 1,000 x 64 tensor
    assert not found
    assert "untied-head-built-tied" in report.verifier.rules_run
