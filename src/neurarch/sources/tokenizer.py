"""A model folder's tokenizer, read as JSON (no tokenizer is loaded, no code runs).

:func:`tokenizer_info` reads ``tokenizer.json``'s vocabulary and added tokens;
:func:`read_folder` does it for a local model folder, adding the
``added_tokens_decoder`` of ``tokenizer_config.json``.  The verifier compares
the number of ids with the embedding's rows (``tokenizer-outgrows-embedding``);
the revision tracker compares them between revisions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_TOKENIZER_BYTES = 256 << 20  # a tokenizer.json larger than this is not read (the largest published are ~30 MB)


@dataclass
class TokenizerInfo:
    """What tokenizer.json (and tokenizer_config.json) say, read as JSON."""

    vocab: dict[str, int] = field(default_factory=dict)
    added: dict[str, tuple[int, bool]] = field(default_factory=dict)  # content -> (id, special)
    source: str = ""  # the files read, for messages

    @property
    def size(self) -> int:
        """Number of ids: one past the largest id of the vocabulary and the added tokens."""
        ids = list(self.vocab.values()) + [i for i, _ in self.added.values()]
        return max(ids) + 1 if ids else 0

    def id_of(self, token: str) -> int | None:
        if token in self.added:
            return self.added[token][0]
        return self.vocab.get(token)


def tokenizer_info(data: dict[str, Any], source: str = "") -> TokenizerInfo:
    """The vocabulary and added tokens of a parsed tokenizer.json."""
    info = TokenizerInfo(source=source)
    model = data.get("model") or {}
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict):
        info.vocab = {str(t): int(i) for t, i in vocab.items() if isinstance(i, int) and not isinstance(i, bool)}
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...], the id is the position
        info.vocab = {str(p[0] if isinstance(p, list) and p else p): i for i, p in enumerate(vocab)}
    for tok in data.get("added_tokens") or []:
        if isinstance(tok, dict) and "content" in tok and isinstance(tok.get("id"), int):
            info.added[str(tok["content"])] = (tok["id"], bool(tok.get("special")))
    return info


def _read_json(path: Path) -> Any:
    try:
        if not path.is_file() or path.stat().st_size > MAX_TOKENIZER_BYTES:
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None  # an unreadable tokenizer file is not the model's problem: the check just does not run


def read_folder(folder: Path) -> TokenizerInfo | None:
    """The tokenizer of a model folder, or None when it has no readable tokenizer.json / tokenizer_config.json."""
    data = _read_json(folder / "tokenizer.json")
    read = []
    info = TokenizerInfo()
    if isinstance(data, dict):
        info = tokenizer_info(data)
        read.append("tokenizer.json")
    cfg = _read_json(folder / "tokenizer_config.json")
    decoder = cfg.get("added_tokens_decoder") if isinstance(cfg, dict) else None
    if isinstance(decoder, dict):
        for key, tok in decoder.items():
            if isinstance(tok, dict) and isinstance(tok.get("content"), str) and str(key).isdigit():
                info.added.setdefault(tok["content"], (int(key), bool(tok.get("special"))))
        read.append("tokenizer_config.json")
    if not read:
        return None
    info.source = " and ".join(str(folder / name) for name in read)
    return info
