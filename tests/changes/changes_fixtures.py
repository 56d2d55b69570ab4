"""Helpers: a model repo built by git in the test: six revisions with fixed dates, one typed change each.

c1 2026-01-05  baseline: tiny Llama (hidden 64, 2 layers, vocab 1000), F32 weights, tokenizer, template
c2 2026-02-02  config: hidden_size 64 -> 128, num_hidden_layers 2 -> 3
c3 2026-03-02  chat template only (tokenizer_config.json's chat_template)
c4 2026-04-06  weights re-saved in BF16, same names and shapes
c5 2026-05-04  tokenizer.json: 4 added tokens, ids 1000..1003, past the 1000 embedding rows
c6 2026-06-01  config reverted to hidden 64, 2 layers (closes c2's range)
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import torch
from safetensors.torch import save

BASE_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}
TEMPLATE_1 = "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>\n{% endfor %}"
TEMPLATE_2 = "{% for m in messages %}<s>[{{ m['role'] }}]\n{{ m['content'] }}</s>\n{% endfor %}{% if add_generation_prompt %}<s>[assistant]\n{% endif %}"
NEW_TOKENS = ["<|im_start|>", "<|im_end|>", "<|tool|>", "<|pad|>"]


def llama_tensors(cfg: dict, dtype=torch.float32) -> dict[str, torch.Tensor]:
    """Zeros named and shaped like a LlamaForCausalLM state dict for ``cfg``."""
    d, v, f = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    kv = cfg["num_key_value_heads"] * d // cfg["num_attention_heads"]
    t = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,), "lm_head.weight": (v, d)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t |= {
            p + "self_attn.q_proj.weight": (d, d), p + "self_attn.k_proj.weight": (kv, d),
            p + "self_attn.v_proj.weight": (kv, d), p + "self_attn.o_proj.weight": (d, d),
            p + "mlp.gate_proj.weight": (f, d), p + "mlp.up_proj.weight": (f, d), p + "mlp.down_proj.weight": (d, f),
            p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
        }  # fmt: skip
    return {k: torch.zeros(s, dtype=dtype) for k, s in t.items()}


def tokenizer_json(extra: list[str] = ()) -> dict:
    """A BPE tokenizer.json: 996 base ids (0..995) + added tokens; ``extra`` get ids 1000, 1001, ..."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"t{i}": i for i in range(3, 996)}
    added = [{"id": i, "content": c, "special": True} for c, i in (("<unk>", 0), ("<s>", 1), ("</s>", 2))]
    added += [{"id": 1000 + j, "content": c, "special": True} for j, c in enumerate(extra)]
    return {"version": "1.0", "added_tokens": added, "model": {"type": "BPE", "vocab": vocab, "merges": []}}


def tokenizer_config(template: str) -> dict:
    return {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "model_max_length": 256, "chat_template": template}


def js(obj) -> bytes:
    return (json.dumps(obj, indent=2) + "\n").encode()


class GitRepo:
    def __init__(self, path: Path):
        self.path = path
        self.commits: list[str] = []
        path.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str, date: str | None = None) -> str:
        env = {**os.environ, "GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "t@example.com",
               "GIT_COMMITTER_NAME": "Test", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip
        if date:
            env |= {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
        out = subprocess.run(["git", "-C", str(self.path), *args], env=env, capture_output=True, check=True, timeout=30)
        return out.stdout.decode()

    def commit(self, files: dict[str, bytes | None], message: str, date: str) -> str:
        for name, content in files.items():
            p = self.path / name
            if content is None:
                p.unlink()
            else:
                p.write_bytes(content)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message, date=date)
        sha = self.git("rev-parse", "HEAD").strip()
        self.commits.append(sha)
        return sha


def model_revisions() -> list[tuple[dict[str, bytes | None], str, str]]:
    """(files changed, title, date) of the six revisions in the module docstring."""
    cfg = dict(BASE_CONFIG)
    big = dict(cfg, hidden_size=128, num_hidden_layers=3)
    gen = {"bos_token_id": 1, "eos_token_id": 2, "max_new_tokens": 64}
    return [
        ({"config.json": js(cfg), "generation_config.json": js(gen), "tokenizer.json": js(tokenizer_json()),
          "tokenizer_config.json": js(tokenizer_config(TEMPLATE_1)), "model.safetensors": save(llama_tensors(cfg)),
          "README.md": b"# tiny llama\n"}, "initial upload", "2026-01-05T10:00:00+00:00"),
        ({"config.json": js(big)}, "wider and deeper", "2026-02-02T10:00:00+00:00"),
        ({"tokenizer_config.json": js(tokenizer_config(TEMPLATE_2))}, "new chat template", "2026-03-02T10:00:00+00:00"),
        ({"model.safetensors": save(llama_tensors(cfg, torch.bfloat16))}, "bf16 weights", "2026-04-06T10:00:00+00:00"),
        ({"tokenizer.json": js(tokenizer_json(NEW_TOKENS))}, "chat tokens", "2026-05-04T10:00:00+00:00"),
        ({"config.json": js(cfg), "README.md": b"# tiny llama (reverted)\n"}, "revert the width change", "2026-06-01T10:00:00+00:00"),
    ]  # fmt: skip


def build_model_repo(path: Path) -> GitRepo:
    repo = GitRepo(path)
    for files, title, date in model_revisions():
        repo.commit(files, title, date)
    return repo


def add_to_fake_hub(hub, repo_id: str) -> list[str]:
    """The same six revisions as commits of a fake hub repo (each commit holds every file)."""
    files: dict[str, bytes] = {}
    shas = []
    for changed, title, date in model_revisions():
        files = {k: v for k, v in (files | changed).items() if v is not None}
        shas.append(hub.add_commit(repo_id, files, date=date.replace("+00:00", ".000Z"), title=title))
    return shas
