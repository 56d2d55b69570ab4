"""Tiny configs of real architectures, shared by the memory tests (real CPU steps take well under a second)."""

# A Llama with grouped-query attention: 2 layers, hidden 64, 4 heads of 16, 2 KV heads.
LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
}
BERT = {
    "model_type": "bert",
    "architectures": ["BertForMaskedLM"],
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "vocab_size": 1000,
    "max_position_embeddings": 128,
}
MIXTRAL = {
    "model_type": "mixtral",
    "architectures": ["MixtralForCausalLM"],
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 500,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "max_position_embeddings": 256,
}
# A wider Llama (the plan-report and measure tests): 2 layers, hidden 256, 8 heads of 32, 2 KV heads,
# a 4,096-position table (a --seq-len 1024 plan fits); a real CPU step takes a few seconds.
LLAMA_WIDE = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 256,
    "intermediate_size": 704,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "vocab_size": 4000,
    "max_position_embeddings": 4096,
}


def clip(layers: int = 5) -> dict:
    """A tiny CLIP, both towers ``layers`` deep (the depth-cut tests cut them together)."""
    return dict(
        model_type="clip",
        architectures=["CLIPModel"],
        text_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4, vocab_size=1000, max_position_embeddings=32, bos_token_id=0, eos_token_id=2),
        vision_config=dict(hidden_size=48, intermediate_size=96, num_hidden_layers=layers, num_attention_heads=4, image_size=32, patch_size=16),
        projection_dim=32,
    )


def bart(layers: int = 6) -> dict:
    """A tiny BART, encoder and decoder ``layers`` deep (an encoder beside its decoder: cut together)."""
    return dict(
        model_type="bart",
        architectures=["BartForConditionalGeneration"],
        d_model=32,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        vocab_size=1000,
        max_position_embeddings=64,
    )


def t5(layers: int = 6) -> dict:
    """A tiny T5, both stacks ``layers`` deep (each stack's first block holds the position bias: a special first layer)."""
    return dict(model_type="t5", architectures=["T5ForConditionalGeneration"], d_model=64, d_ff=128, d_kv=16, num_layers=layers, num_heads=4, vocab_size=1000)
