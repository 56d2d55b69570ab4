"""``inputs.prepare``: resolve, build, plan the inputs and build the recipe's model, in one call.

Expected classes, shapes and sizes are worked out from the configs below, never read back from neurarch.
"""

import json
from pathlib import Path

import pytest

from neurarch.errors import InputError, LimitError
from neurarch.inputs.prepare import prepare, resolve_spec
from neurarch.options import InputOptions, Options, PlanOptions
from tiny_configs import BERT  # a 2-layer BERT with a masked-LM head: hidden 64, 4 heads, vocabulary 1,000


def _config(tmp_path, cfg):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_task_builds_the_recipe_head_beside_the_published_model(tmp_path):
    opts = Options(inputs=InputOptions(batch=2, seq_len=32), plan=PlanOptions(task="seq-cls", num_labels=3))
    p = prepare(_config(tmp_path, BERT), opts)
    assert p.built.model_class == "BertForMaskedLM"  # architectures[0]: what the trace and the checkpoint see
    assert p.trained.model_class == "BertForSequenceClassification"
    # the classifier maps the pooled hidden state (64) to --num-labels 3
    assert tuple(p.trained.model.classifier.weight.shape) == (3, 64)
    assert p.trained.model is not p.built.model
    assert tuple(p.plan.main_shape) == (2, 32)  # --batch 2, --seq-len 32
    assert p.attention.used == "sdpa" and p.attention.model_class == "BertForSequenceClassification"


def test_no_recipe_trains_the_published_model(tmp_path):
    p = prepare(_config(tmp_path, BERT), Options(inputs=InputOptions(seq_len=16)))
    assert p.trained is p.built
    # transformers' pick on a CUDA card for a class with an SDPA path
    assert p.attention.used == "sdpa" and p.attention.how == "what transformers picks on a CUDA card"
    q = prepare(p.source, Options(inputs=InputOptions(seq_len=16)), recipe=False)  # an already resolved source
    assert q.trained is q.built and tuple(q.attention) == (None, "", None)
    assert tuple(q.plan.main_shape) == (1, 16)


def test_eager_attention_is_named_and_its_scores_bounded_before_anything_runs(tmp_path):
    spec = _config(tmp_path, {**BERT, "max_position_embeddings": 2**22})
    eager = PlanOptions(modes=("full",), attn_implementation="eager")
    p = prepare(spec, Options(inputs=InputOptions(seq_len=64), plan=eager))
    assert p.attention.used == "eager" and p.attention.how == "--attn-implementation eager"
    assert p.trained.model.config._attn_implementation == "eager"
    # batch 8 x 4 heads x (2^22)^2 scores x 4 bytes = 2.25e15 bytes > 1 PiB (2^50); SDPA keeps no scores
    assert 8 * 4 * (2**22) ** 2 * 4 > 2**50
    huge = Options(inputs=InputOptions(batch=8, seq_len=2**22), plan=eager)
    assert tuple(prepare(spec, huge, recipe=False).plan.main_shape) == (8, 2**22)  # the published SDPA model is within bounds
    with pytest.raises(LimitError) as e:
        prepare(spec, huge)
    assert "limit of 1 PiB" in str(e.value) and "\n" not in str(e.value)


def test_task_on_a_plain_module_is_a_one_line_error(tmp_path):
    models = Path(__file__).resolve().parents[1] / "models"
    spec = f"python:{models / 'tied_mlp.py'}:TiedWeightsModel"
    assert resolve_spec(spec, Options()).config is None
    with pytest.raises(InputError, match="apply to transformers models only"):
        prepare(spec, Options(inputs=InputOptions(input_shape=(16,)), plan=PlanOptions(task="seq-cls")))
