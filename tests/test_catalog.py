"""Every bundled catalog model builds, traces forward and backward, and its
derived count equals the published checkpoint count recorded in the catalog
(or differs by an exactly explained amount).  The recorded counts come from
the Hub's safetensors totals and equivalents (shared/catalog/CHECKPOINT_COUNTS.tsv),
not from our graph."""

import pytest

from neurarch import analyze
from neurarch.sources.catalog import entries

CATALOG = sorted(entries())


@pytest.mark.parametrize("model_id", CATALOG)
def test_catalog_model_traces_and_matches_checkpoint(model_id):
    r = analyze(model_id)
    assert r.model.source == "catalog"
    assert r.forward_pass.ok, r.forward_pass.error
    assert r.backward_pass is not None and r.backward_pass.ok, r.backward_pass.error
    assert r.structure.layers > 0
    p = r.params
    if p.checkpoint is None:
        return
    # derived == checkpoint, or every scalar of the difference is accounted for.
    assert p.delta == p.derived - p.checkpoint
    if p.delta != 0:
        assert p.explained, (model_id, p.delta, p.differences)
        assert sum(d.scalars for d in p.differences) == p.delta


def test_catalog_has_every_shared_config():
    # 27 configs ship in the package (shared/catalog at the time of writing).
    assert len(CATALOG) == 27
    assert "microsoft/resnet-50" in CATALOG and "facebook/dinov2-small" in CATALOG


def test_resnet50_anchor_is_exact():
    # Published: microsoft/resnet-50 checkpoint holds 25,610,152 scalars.
    r = analyze("microsoft/resnet-50")
    assert r.params.checkpoint == 25_610_152
    assert r.params.derived == 25_610_152
    assert r.params.delta == 0 and r.params.delta_pct == 0
    # 25,557,032 learnable + 53,120 BatchNorm running mean/var scalars.
    assert r.params.parameters == 25_557_032
    assert r.params.buffers == 53_120
    # 53 BatchNorm layers, one num_batches_tracked counter each, kept apart.
    assert r.params.counters == 53


def test_dinov2_small_anchor_is_exact_including_mask_token():
    # Published: facebook/dinov2-small checkpoint holds 22,056,576 scalars; the
    # seed missed the 384-scalar mask_token.  It is a parameter that takes no
    # part in a plain forward pass, so it must show up as unused, yet be counted.
    r = analyze("facebook/dinov2-small")
    assert r.params.derived == r.params.checkpoint == 22_056_576
    assert r.structure.unused_parameters == ["embeddings.mask_token"]


def test_gpt2_difference_is_the_legacy_causal_mask():
    # The published gpt2 checkpoint holds 137,022,720 scalars: 124,439,808
    # learnable plus 12 layers x 1x1x1024x1024 causal-mask buffers `attn.bias`
    # = 12 * 1,048,576 = 12,582,912 that current transformers no longer has.
    r = analyze("gpt2")
    p = r.params
    assert p.parameters == 124_439_808
    assert p.delta == -12 * 1024 * 1024
    assert p.explained and p.differences[0].tensors == ["h.*.attn.bias"]
    # lm_head is tied to the token embedding: counted once.
    assert ["transformer.wte.weight", "lm_head.weight"] in p.tied or ["lm_head.weight", "transformer.wte.weight"] in p.tied


def test_llama2_difference_is_per_layer_inv_freq():
    # 6,738,417,664 published = 6,738,415,616 learnable + 32 layers x 64 inv_freq (head_dim 128 / 2).
    p = analyze("meta-llama/Llama-2-7b-hf").params
    assert p.parameters == 6_738_415_616
    assert p.delta == -(32 * 64)
    assert p.explained


def test_minilm_difference_is_position_ids_buffer():
    # all-MiniLM-L6-v2's checkpoint (22,713,728) stores embeddings.position_ids
    # (1 x 512 positions) that current BERT keeps as a non-persistent buffer.
    p = analyze("sentence-transformers/all-MiniLM-L6-v2").params
    assert p.delta == -512
    assert p.explained and p.differences[0].tensors == ["embeddings.position_ids"]


def test_aliases_resolve_to_the_same_entry():
    assert analyze("openai-community/gpt2").model.id == "gpt2"
