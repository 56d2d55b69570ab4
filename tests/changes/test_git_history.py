"""The tracker on a local git model repo built by the test (see conftest.py for the six revisions).

Expected figures are hand computations written beside each value.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import torch
from changes_fixtures import BASE_CONFIG, TEMPLATE_1, GitRepo, js, llama_tensors, tokenizer_config, tokenizer_json
from safetensors.torch import save

from neurarch.changes import osv, readers, render, track

# Tiny Llama, untied, vocab V=1000, intermediate f=128, 4 heads, 2 KV heads (head_dim = d/4).
# Per layer: q d*d + k d*(d/2) + v d*(d/2) + o d*d + MLP 3*d*f + 2 RMSNorms 2d.
#   d=64:  4,096 + 2,048 + 2,048 + 4,096 + 24,576 + 128 = 36,992
#   d=128: 16,384 + 8,192 + 8,192 + 16,384 + 49,152 + 256 = 98,560
# Model: embed V*d + layers + final norm d + lm_head V*d.
SMALL = 64_000 + 2 * 36_992 + 64 + 64_000  # = 202,048 (hidden 64, 2 layers)
BIG = 128_000 + 3 * 98_560 + 128 + 128_000  # = 551,808 (hidden 128, 3 layers)


def by_commit(history, commit):
    return [c for c in history.changes if c.commit == commit]


def test_every_revision_read_newest_first(history, model_repo):
    assert [r.commit for r in history.revisions] == list(reversed(model_repo.commits))
    assert [r.date.isoformat() for r in history.revisions][-1] == "2026-01-05T10:00:00+00:00"
    assert history.notes == [] and not history.truncated


def test_exactly_one_typed_change_per_revision(history, model_repo):
    c = model_repo.commits
    kinds = [(ch.commit, ch.kind, ch.file) for ch in reversed(history.changes)]
    assert kinds == [
        (c[1], "config", "config.json"),
        (c[2], "chat_template", "tokenizer_config.json"),
        (c[3], "weights", "model.safetensors"),
        (c[4], "tokenizer", "tokenizer.json"),
        (c[5], "config", "config.json"),  # the README edit of c6 is not a tracked file
    ]


def test_width_change_builds_both_revisions(history, model_repo):
    (ch,) = by_commit(history, model_repo.commits[1])
    assert ch.impact == "graph"
    assert [(k.key, k.before, k.after) for k in ch.keys] == [("hidden_size", 64, 128), ("num_hidden_layers", 2, 3)]
    assert ch.before.parameters == SMALL and ch.after.parameters == BIG
    assert f"parameters {SMALL:,} -> {BIG:,} (+{BIG - SMALL:,})" in ch.summary  # +349,760
    assert ch.findings == []


def test_chat_template_only(history, model_repo):
    (ch,) = by_commit(history, model_repo.commits[2])
    assert ch.kind == "chat_template" and ch.keys == []
    assert "-{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>" in ch.template_diff
    assert "+{% endfor %}{% if add_generation_prompt %}<s>[assistant]" in ch.template_diff
    assert ch.summary == "chat template changed (tokenizer_config.json: +4 -2 lines)"


def test_weights_resaved_in_bf16(history, model_repo):
    (ch,) = by_commit(history, model_repo.commits[3])
    # 2 layers x 9 tensors + embed + norm + lm_head = 21 tensors, every one F32 -> BF16, shapes kept
    assert ch.summary.startswith("weights re-saved in another dtype (F32 -> BF16): same 21 tensors and shapes")
    assert ch.weights_before.scalars == ch.weights_after.scalars == SMALL
    assert ch.weights_before.dtypes == {"F32": SMALL} and ch.weights_after.dtypes == {"BF16": SMALL}
    assert len(ch.tensors) == 21 and all(t.before.startswith("F32[") and t.after.startswith("BF16[") for t in ch.tensors)


def test_tokenizer_outgrows_the_embedding(history, model_repo):
    (ch,) = by_commit(history, model_repo.commits[4])
    # 996 base ids (0..995) + 4 added at 1000..1003 -> 1,004 ids; the embedding has vocab_size = 1,000 rows
    assert ch.summary == "tokenizer: 4 token(s) added; ids 996 -> 1,004"
    assert ch.findings == ["the tokenizer has 1,004 ids but the embedding has 1,000 rows (config vocab_size): ids 1,000..1,003 index past the embedding (resize the embeddings, or drop the tokens)"]


def test_revert_closes_the_first_range(history, model_repo):
    c = model_repo.commits
    first = by_commit(history, c[1])[0]
    revert = by_commit(history, c[5])[0]
    assert first.fixed == c[5] and revert.reverts == c[1]
    assert revert.before.parameters == BIG and revert.after.parameters == SMALL
    others = [ch for ch in history.changes if ch.commit not in (c[1], c[5])]
    assert all(ch.fixed is None for ch in others)  # nothing else was put back


def test_osv_records_validate_and_are_stable(history, model_repo):
    recs = osv.records(history)
    assert len(recs) == 5
    for r in recs:
        osv.validate(r)
        assert r["id"].startswith("x_NEURARCH-")
    again = osv.records(track.track(readers.GitReader(model_repo.path)))
    assert [r["id"] for r in again] == [r["id"] for r in recs]
    assert json.dumps(again, sort_keys=True) == json.dumps(recs, sort_keys=True)  # same text on every run
    width = next(r for r in recs if r["affected"][0]["ranges"][0]["events"][0]["introduced"] == model_repo.commits[1])
    assert width["affected"][0]["ranges"][0] == {
        "type": "GIT",
        "repo": model_repo.path.resolve().as_uri(),
        "events": [{"introduced": model_repo.commits[1]}, {"fixed": model_repo.commits[5]}],
    }
    assert width["published"] == "2026-02-02T10:00:00Z" and width["modified"] == "2026-06-01T10:00:00Z"
    assert width["database_specific"]["impact"] == "graph"


def test_osv_record_breaks_the_schema_when_an_extra_key_is_added(history):
    import jsonschema

    rec = osv.records(history)[0] | {"neurarch": {}}
    with pytest.raises(jsonschema.ValidationError):
        osv.validate(rec)


def test_since_reports_later_revisions_against_the_one_before(model_repo):
    from datetime import datetime, timezone

    h = track.track(readers.GitReader(model_repo.path), since=datetime(2026, 4, 1, tzinfo=timezone.utc))
    assert [r.commit for r in h.revisions] == list(reversed(model_repo.commits[3:]))
    assert [c.kind for c in h.changes] == ["config", "tokenizer", "weights"]
    assert h.changes[0].reverts is None  # the change it undoes is before --since


def test_text_and_markdown_say_the_same(history, model_repo):
    text = render.text(history)
    md = render.markdown(history)
    for needle in ("config changes the model", "chat template changed", "F32 -> BF16", "ids 1,000..1,003"):
        assert needle in text and needle in md
    assert f"put back by {model_repo.commits[5][:12]}" in text
    assert "```diff" in md


# --------------------------------------------------------------------------- renames, rope, LFS, bad files


def test_transformers5_renames_are_cosmetic_and_rope_is_numerics(tmp_path):
    repo = GitRepo(tmp_path / "r")
    cfg = dict(BASE_CONFIG, rope_scaling={"rope_type": "linear", "factor": 2.0})
    renamed = {k: v for k, v in cfg.items() if k not in ("torch_dtype", "rope_scaling")}
    renamed |= {"dtype": "float32", "rope_parameters": {"rope_type": "linear", "factor": 2.0}}
    stretched = dict(renamed, rope_parameters={"rope_type": "linear", "factor": 4.0})
    repo.commit({"config.json": js(cfg)}, "v1", "2026-01-01T00:00:00+00:00")
    repo.commit({"config.json": js(renamed)}, "transformers 5 keys", "2026-01-02T00:00:00+00:00")
    repo.commit({"config.json": js(stretched)}, "longer context", "2026-01-03T00:00:00+00:00")
    h = track.track(readers.GitReader(repo.path))
    stretch, rename = h.changes
    assert rename.impact == "cosmetic"
    assert {(k.key, k.renamed_from) for k in rename.keys} == {("dtype", "torch_dtype"), ("rope_parameters", "rope_scaling")}
    assert rename.before.parameters == rename.after.parameters == SMALL
    assert stretch.impact == "numerics" and "rope_parameters" in stretch.details[-1]


def test_lfs_pointer_without_object_then_with_it(tmp_path):
    import hashlib

    repo = GitRepo(tmp_path / "lfs")
    blobs = [save(llama_tensors(BASE_CONFIG)), save(llama_tensors(BASE_CONFIG, torch.bfloat16))]

    def pointer(b: bytes) -> bytes:
        return b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (hashlib.sha256(b).hexdigest().encode(), len(b))

    repo.commit({"config.json": js(BASE_CONFIG), "model.safetensors": pointer(blobs[0])}, "v1", "2026-01-01T00:00:00+00:00")
    repo.commit({"model.safetensors": pointer(blobs[1])}, "v2", "2026-01-02T00:00:00+00:00")
    (ch,) = track.track(readers.GitReader(repo.path)).changes
    assert ch.summary == "weights changed (pointer only, header not available)"
    for b in blobs:  # now fetch the LFS objects where git-lfs keeps them
        oid = hashlib.sha256(b).hexdigest()
        obj = repo.path / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
        obj.parent.mkdir(parents=True, exist_ok=True)
        obj.write_bytes(b)
    (ch,) = track.track(readers.GitReader(repo.path)).changes
    assert ch.summary.startswith("weights re-saved in another dtype (F32 -> BF16): same 21 tensors")


def test_missing_config_and_unparseable_file_are_notes(tmp_path):
    repo = GitRepo(tmp_path / "bad")
    a = repo.commit({"config.json": js(BASE_CONFIG), "tokenizer_config.json": js(tokenizer_config(TEMPLATE_1))}, "v1", "2026-01-01T00:00:00+00:00")
    b = repo.commit({"config.json": None}, "config gone", "2026-01-02T00:00:00+00:00")
    c = repo.commit({"tokenizer_config.json": b'{"bos_token": "<s>",'}, "broken json", "2026-01-03T00:00:00+00:00")
    d = repo.commit({"config.json": js(dict(BASE_CONFIG, max_position_embeddings=512))}, "config back", "2026-01-04T00:00:00+00:00")
    e = repo.commit({"generation_config.json": b"[1, 2]"}, "a list, not an object", "2026-01-05T00:00:00+00:00")
    h = track.track(readers.GitReader(repo.path))
    assert (e, "generation_config.json: not a JSON object") in [(n.commit, n.message.split(" (")[0]) for n in h.notes]
    notes = [(n.commit, n.message.split(" (")[0]) for n in h.notes]
    assert (b, "no config.json at this revision") in notes
    assert (c, "no config.json at this revision") in notes
    assert any(n.commit == c and n.message.startswith("tokenizer_config.json: not valid JSON") for n in h.notes)
    # the config that came back is compared with the last one seen (a's): one key
    (ch,) = [x for x in h.changes if x.commit == d]
    assert [(k.key, k.before, k.after) for k in ch.keys] == [("max_position_embeddings", 256, 512)]
    assert ch.impact == "numerics"  # same layers and parameters, longer positions
    assert a not in {x.commit for x in h.changes}


def test_generation_eos_disagreeing_with_the_tokenizer(tmp_path):
    repo = GitRepo(tmp_path / "gen")
    repo.commit({"config.json": js(BASE_CONFIG), "tokenizer.json": js(tokenizer_json()), "tokenizer_config.json": js(tokenizer_config(TEMPLATE_1)),
                 "generation_config.json": js({"bos_token_id": 1, "eos_token_id": 2})}, "v1", "2026-01-01T00:00:00+00:00")  # fmt: skip
    sha = repo.commit({"generation_config.json": js({"bos_token_id": 1, "eos_token_id": [5, 7]})}, "eos", "2026-01-02T00:00:00+00:00")
    (ch,) = track.track(readers.GitReader(repo.path)).changes
    assert ch.commit == sha and ch.kind == "generation_config"
    assert ch.details == ["`eos_token_id`: 2 -> [5, 7]"]
    assert ch.findings == ["generation_config eos_token_id [5, 7] is not the tokenizer's EOS `</s>` (id 2)"]


def test_not_a_git_clone(tmp_path):
    from neurarch.changes.errors import ChangesError

    with pytest.raises(ChangesError, match="not a git clone"):
        readers.GitReader(tmp_path)
    subprocess.run(["git", "init", "-q", str(tmp_path / "empty")], check=True)
    h = track.track(readers.GitReader(tmp_path / "empty"))
    assert h.revisions == [] and h.notes[0].message == "the repo has no commits yet"


def test_special_tokens_in_tokenizer_config_and_eos_change(tmp_path):
    repo = GitRepo(tmp_path / "tc")
    tc = tokenizer_config(TEMPLATE_1) | {"added_tokens_decoder": {"0": {"content": "<unk>", "special": True},
                                                                  "1": {"content": "<s>", "special": True}}}  # fmt: skip
    repo.commit({"config.json": js(BASE_CONFIG), "tokenizer_config.json": js(tc)}, "v1", "2026-01-01T00:00:00+00:00")
    tc2 = tc | {"eos_token": "<|eot|>", "added_tokens_decoder": {**tc["added_tokens_decoder"], "999": {"content": "<|eot|>", "special": True}}}
    sha = repo.commit({"tokenizer_config.json": js(tc2)}, "eot", "2026-01-02T00:00:00+00:00")
    (ch,) = track.track(readers.GitReader(repo.path)).changes
    assert ch.commit == sha and ch.kind == "tokenizer" and ch.file == "tokenizer_config.json"
    assert ch.details == ["`added_tokens_decoder`: 1 token(s) added: `<|eot|>` (id 999, special)", '`eos_token`: "</s>" -> "<|eot|>"']


def test_template_moved_to_its_own_file_and_resharded_weights(tmp_path):
    import json as _json

    repo = GitRepo(tmp_path / "mv")
    tensors = llama_tensors(BASE_CONFIG)
    names = sorted(tensors)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": save({k: tensors[k] for k in names[:half]}),
              "model-00002-of-00002.safetensors": save({k: tensors[k] for k in names[half:]})}  # fmt: skip
    index = {"metadata": {}, "weight_map": {k: ("model-00001-of-00002.safetensors" if i < half else "model-00002-of-00002.safetensors") for i, k in enumerate(names)}}
    no_template = {k: v for k, v in tokenizer_config(TEMPLATE_1).items() if k != "chat_template"}
    repo.commit({"config.json": js(BASE_CONFIG), "tokenizer_config.json": js(tokenizer_config(TEMPLATE_1)),
                 "model.safetensors": save(tensors)}, "v1", "2026-01-01T00:00:00+00:00")  # fmt: skip
    moved = repo.commit({"tokenizer_config.json": js(no_template), "chat_template.jinja": TEMPLATE_1.encode()}, "template file", "2026-01-02T00:00:00+00:00")
    resharded = repo.commit({"model.safetensors": None, "model.safetensors.index.json": _json.dumps(index).encode(), **shards}, "shards", "2026-01-03T00:00:00+00:00")
    h = track.track(readers.GitReader(repo.path))
    assert moved not in {c.commit for c in h.changes}  # same template text, now in its own file: nothing changed for users
    (ch,) = h.changes
    assert ch.commit == resharded and ch.kind == "weights"
    assert ch.summary == f"weights re-saved: same 21 tensors, shapes and dtypes; checkpoint {SMALL:,} -> {SMALL:,} scalars"
    assert "sharding changed: model.safetensors -> model-00001-of-00002.safetensors, model-00002-of-00002.safetensors" in ch.details


def test_preprocessor_change(tmp_path):
    repo = GitRepo(tmp_path / "pp")
    repo.commit({"config.json": js(BASE_CONFIG), "preprocessor_config.json": js({"size": {"height": 224, "width": 224}, "do_resize": True})}, "v1", "2026-01-01T00:00:00+00:00")
    repo.commit({"preprocessor_config.json": js({"size": {"height": 384, "width": 384}, "do_resize": True})}, "v2", "2026-01-02T00:00:00+00:00")
    (ch,) = track.track(readers.GitReader(repo.path)).changes
    assert ch.kind == "preprocessor" and ch.summary == "preprocessor config: size"
    assert ch.details == ['`size`: {"height": 224, "width": 224} -> {"height": 384, "width": 384}']
