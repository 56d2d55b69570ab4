"""Whether a config change changes the model: build both revisions and compare.

``compare(before, after)`` builds each config with :func:`neurarch.analyze` (on
fake tensors, no weights, verifier and backward pass off) and compares the
parameter count, the class built and the layer table (name, type, output shape,
parameters of every row).  When the built models are the same it asks
transformers how it reads each config (``AutoConfig.for_model(...).to_dict()``,
which maps the transformers 5 renames ``torch_dtype`` -> ``dtype`` and
``rope_scaling`` -> ``rope_parameters``): settings that differ there change what
the model computes (``numerics``); if nothing differs the change is ``cosmetic``.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .types import Impact, PlanFigures

# Keys transformers writes that say nothing about the model.
COSMETIC_KEYS = frozenset({"transformers_version", "_name_or_path", "_commit_hash", "_attn_implementation_autoset"})
# transformers 5 renamed these (old -> new); a rename with the same value is cosmetic.
RENAMES = {"torch_dtype": "dtype", "rope_scaling": "rope_parameters"}
FIXED_SEQ_LEN = 16  # tokens of the input both revisions are traced with


@dataclass
class Built:
    figures: PlanFigures
    signature: tuple | None  # None when the build failed


_BUILT: dict[str, Built] = {}  # canonical config JSON sha256 -> what it built (per process)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def build(cfg: dict) -> Built:
    """Build one config (cached by its content) and keep what the comparison needs."""
    from .. import Options, analyze
    from ..errors import NeurarchError
    from ..inputs import InputOptions

    key = hashlib.sha256(_canonical(cfg).encode()).hexdigest()
    if key in _BUILT:
        return _BUILT[key]
    with tempfile.TemporaryDirectory(prefix="neurarch-changes-") as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(cfg))
        try:
            # One fixed short input for both sides, so the layer shapes compared are the model's, not the
            # default input's (which follows max_position_embeddings).
            opts = Options(inputs=InputOptions(batch=1, seq_len=FIXED_SEQ_LEN), verify=False, backward=False, offline=True, timeout_s=300)
            report = analyze(str(path), opts)
        except NeurarchError as e:
            built = Built(PlanFigures(error=str(e).splitlines()[0]), None)
        except Exception as e:  # a model class that fails to build is a finding here, not a crash
            built = Built(PlanFigures(error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"), None)
        else:
            nodes = getattr(getattr(report, "structure", None), "nodes", []) or []
            signature = (
                getattr(report.model, "model_class", None),
                report.params.parameters,
                report.params.derived,
                tuple((n.name, n.type, tuple(n.output_shape or ()), n.parameters) for n in nodes),
            )
            built = Built(
                PlanFigures(
                    parameters=report.params.parameters,
                    layers=len(nodes),
                    model_class=getattr(report.model, "model_class", None),
                ),
                signature,
            )
    _BUILT[key] = built
    return built


def normalized(cfg: dict) -> dict | None:
    """How transformers reads ``cfg`` (its to_dict()), or None when it cannot."""
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str):
        return None
    try:
        import logging

        from transformers import AutoConfig

        logging.getLogger("transformers").setLevel(logging.ERROR)
        data = AutoConfig.for_model(model_type, **{k: v for k, v in cfg.items() if k != "model_type"}).to_dict()
    except Exception:
        return None
    return {k: v for k, v in data.items() if k not in COSMETIC_KEYS}


def setting_differences(before: dict, after: dict) -> list[str]:
    """Keys whose value transformers reads differently (after normalising both)."""
    a, b = normalized(before), normalized(after)
    if a is None or b is None:
        a = {k: v for k, v in before.items() if k not in COSMETIC_KEYS}
        b = {k: v for k, v in after.items() if k not in COSMETIC_KEYS}
    return sorted(k for k in set(a) | set(b) if _canonical(a.get(k)) != _canonical(b.get(k)))


def compare(before: dict, after: dict) -> tuple[Impact, PlanFigures, PlanFigures, list[str]]:
    """(impact, figures before, figures after, setting keys that differ)."""
    a, b = build(before), build(after)
    settings = setting_differences(before, after)
    if a.signature is None or b.signature is None:
        return ("cosmetic" if not settings else "unknown"), a.figures, b.figures, settings
    if a.signature != b.signature:
        return "graph", a.figures, b.figures, settings
    return ("numerics" if settings else "cosmetic"), a.figures, b.figures, settings
