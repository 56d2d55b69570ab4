"""Data shared by the web tests."""

# A tiny BERT (hand-counted in test_web_routes.py): plans in seconds.
TINY_BERT = {
    "model_type": "bert",
    "architectures": ["BertForMaskedLM"],
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "vocab_size": 100,
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
}
