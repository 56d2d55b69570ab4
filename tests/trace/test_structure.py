"""The layer table: types and output shapes against hand computation."""

from neurarch import Options, analyze
from neurarch.inputs import InputOptions


def test_resnet50_stem_and_head_shapes():
    r = analyze("microsoft/resnet-50")
    nodes = r.structure.nodes
    # 7x7/2 conv: 224 -> 112; 3x3/2 max pool: 112 -> 56.
    assert [(n.type, n.output_shape) for n in nodes[:4]] == [
        ("Conv2D", [64, 112, 112]),
        ("BatchNorm", [64, 112, 112]),
        ("ReLU", [64, 112, 112]),
        ("MaxPool2D", [64, 56, 56]),
    ]
    assert nodes[0].parameters == 64 * 3 * 7 * 7  # 9,408, no bias
    # Four stages of stride 2 after the stem: 56 / 8 = 7; 2048 channels; 1000 classes.
    assert nodes[-3].output_shape == [2048, 1, 1]
    assert (nodes[-1].type, nodes[-1].output_shape, nodes[-1].parameters) == ("Linear", [1000], 2048 * 1000 + 1000)
    # 16 bottleneck blocks, each with one residual add.
    assert sum(n.type == "Add" for n in nodes) == 3 + 4 + 6 + 3


def test_dinov2_tokens_and_blocks():
    r = analyze("facebook/dinov2-small")
    nodes = r.structure.nodes
    # 518 / 14 = 37 patches per side: 37^2 = 1369 patches, + 1 CLS token = 1370.
    assert nodes[0].type == "Patch Embed" and nodes[0].output_shape == [1369, 384]
    attn = [n for n in nodes if n.type == "Multi-Head Attention"]
    mlp = [n for n in nodes if n.type == "Feed Forward"]
    assert len(attn) == len(mlp) == 12
    assert attn[0].output_shape == [1370, 384]
    # q, k, v, out projections with bias: 4 * (384*384 + 384) = 591,360.
    assert attn[0].parameters == 4 * (384 * 384 + 384)
    assert sum(n.type == "LayerScale" for n in nodes) == 24
    assert nodes[-1].type == "LayerNorm"


def test_llama_gqa_rows_and_seq_len_option():
    r = analyze("meta-llama/Llama-3.1-8B-Instruct", Options(inputs=InputOptions(seq_len=128)))
    assert r.input.shape == [1, 128]
    attn = [n for n in r.structure.nodes if n.type == "Grouped-Query Attention"]
    assert len(attn) == 32
    # q 4096x4096, k and v 4096x1024 (8 kv heads x 128), o 4096x4096, no bias.
    assert attn[0].parameters == 2 * 4096 * 4096 + 2 * 4096 * 1024
    assert r.structure.nodes[-1].output_shape == [128, 128256]


def test_depth_option_coarsens_the_table():
    r = analyze("microsoft/resnet-50", Options(depth=1))
    # ResNetForImageClassification's children: resnet, classifier.
    assert [n.name for n in r.structure.nodes] == ["resnet", "classifier"]
    assert r.structure.nodes[0].output_shape == [2048, 7, 7]


def test_forward_failure_is_a_result_with_the_module():
    # Token ids beyond a model's position table: BERT with 512 positions at 600 tokens
    # fails inside the embeddings, and the report says so instead of crashing.
    r = analyze("bert-base-uncased", Options(inputs=InputOptions(seq_len=600)))
    assert not r.forward_pass.ok
    # BertModel expands its 512-position token_type_ids buffer to 600 in its own forward.
    assert r.forward_pass.module == "BertForMaskedLM (the model's own forward)" or r.forward_pass.module.startswith("bert")
    assert r.forward_pass.error
