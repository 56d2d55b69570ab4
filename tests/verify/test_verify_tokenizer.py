"""tokenizer-outgrows-embedding on a local model folder (issue 13's verifier finding).

A tiny Llama with 1,000 embedding rows (config vocab_size) and a tokenizer.json
whose vocabulary holds ids 0..999: with two chat tokens added at ids 1000 and
1001 the tokenizer has 1,002 ids, two past the embedding; the check fires and
names them.  Without them it is silent.
"""

from __future__ import annotations

import json

from neurarch import Options, analyze
from neurarch.options import InputOptions
from tiny_configs import LLAMA


def _folder(tmp_path, added):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA))
    vocab = {f"tok{i}": i for i in range(1000)}
    (folder / "tokenizer.json").write_text(
        json.dumps(
            {
                "model": {"type": "BPE", "vocab": vocab, "merges": []},
                "added_tokens": [{"id": i, "content": t, "special": True} for t, i in added],
            }
        )
    )
    return folder


def _findings(folder):
    r = analyze(str(folder), Options(inputs=InputOptions(seq_len=8), backward=False))
    return r, [f for f in r.findings if f.rule == "tokenizer-outgrows-embedding"]


def test_fires_when_added_tokens_pass_the_embedding(tmp_path):
    report, found = _findings(_folder(tmp_path, [("<s>", 1), ("<|im_start|>", 1000), ("<|im_end|>", 1001)]))
    assert len(found) == 1, report.findings
    f = found[0]
    assert f.severity == "error" and f.node == "model.embed_tokens"
    assert "1,002 ids" in f.message and "1,000 rows" in f.message and "1,000..1,001" in f.message
    assert "<|im_start|>" in f.message and "resize_token_embeddings" in f.fix


def test_silent_when_the_tokenizer_fits(tmp_path):
    report, found = _findings(_folder(tmp_path, [("<s>", 1), ("</s>", 999)]))
    assert not found
    assert "tokenizer-outgrows-embedding" in report.verifier.rules_run


def test_not_applicable_without_tokenizer_files(tmp_path):
    folder = tmp_path / "bare"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA))
    r = analyze(str(folder), Options(inputs=InputOptions(seq_len=8), backward=False))
    assert any(s.startswith("tokenizer-outgrows-embedding:") for s in r.verifier.skipped)
