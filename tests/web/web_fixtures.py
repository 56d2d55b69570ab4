"""Data shared by the web tests."""

from pathlib import Path

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


def no_seconds(x):
    """A report's JSON without its ``seconds`` fields (timings: the one part two runs may differ in)."""
    if isinstance(x, dict):
        return {k: no_seconds(v) for k, v in x.items() if k != "seconds"}
    if isinstance(x, list):
        return [no_seconds(v) for v in x]
    return x


def hub_env(endpoint: str, tmp: Path) -> dict:
    """Worker environment that points huggingface_hub at a local hub (read at import, hence the environment)."""
    return {
        "HF_ENDPOINT": endpoint,
        "HF_HUB_OFFLINE": "0",
        "HF_HUB_CACHE": str(tmp / "hf-cache"),
        "NEURARCH_CACHE_DIR": str(tmp / "neurarch-cache"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
        "HF_HUB_ETAG_TIMEOUT": "5",
    }
