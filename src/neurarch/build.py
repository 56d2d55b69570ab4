"""Stage 2: build the real module from a source, on the meta device.

No weights are read and no memory is allocated: every parameter is a meta
tensor (shape and dtype only).  For transformers configs we build the class
the config names in ``architectures[0]``; when the installed transformers does
not have it we fall back to the class for the same task, or the model type's
base class, and say so in the notes.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from . import limits
from .errors import BuildError, ConfigError, LimitError
from .sources.base import ModelSource

# Architecture-name suffix -> transformers auto-mapping that serves that task.
_TASK_MAPPINGS = [
    ("ForCausalLM", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    ("LMHeadModel", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    ("ForConditionalGeneration", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    ("ForMaskedLM", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    ("ForSequenceClassification", "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"),
    ("ForTokenClassification", "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES"),
    ("ForQuestionAnswering", "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES"),
    ("ForImageClassification", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
]


@dataclass
class BuiltModel:
    model: nn.Module
    config: Any  # a transformers PretrainedConfig, or None for plain modules
    model_class: str
    library: str
    architecture: str | None = None
    model_type: str | None = None
    notes: list[str] = field(default_factory=list)


def _transformers():
    import transformers

    return transformers


def make_config(raw: dict, where: str):
    """A transformers config object from a config.json dict, with clear errors."""
    transformers = _transformers()
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    model_type = raw.get("model_type")
    if not model_type:
        archs = raw.get("architectures") or []
        hint = f" (architectures: {', '.join(map(str, archs))})" if archs else ""
        raise ConfigError(f"{where}: config has no model_type{hint}; neurarch cannot tell which model it is", path=where, field="model_type")
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        raise ConfigError(
            f"{where}: unknown model_type {model_type!r}: transformers {transformers.__version__} does not know it "
            "(if the repo ships its own code, see --trust-remote-code)",
            path=where,
            field="model_type",
        )
    limits.check_config(raw, where)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return CONFIG_MAPPING[model_type].from_dict(dict(raw))
    except Exception as e:  # config classes validate in their own ways
        raise ConfigError(f"{where}: transformers rejects this {model_type} config: {type(e).__name__}: {e}", path=where) from None


def _pick_class(cfg, architecture: str | None, notes: list[str]):
    transformers = _transformers()
    from transformers.models.auto import modeling_auto

    if architecture:
        cls = getattr(transformers, architecture, None)
        if isinstance(cls, type) and issubclass(cls, nn.Module):
            return cls
        for suffix, mapping_name in _TASK_MAPPINGS:
            if architecture.endswith(suffix):
                name = getattr(modeling_auto, mapping_name, {}).get(cfg.model_type)
                if name and isinstance(getattr(transformers, name, None), type):
                    notes.append(
                        f"transformers {transformers.__version__} has no class {architecture}; built {name}, "
                        f"the {cfg.model_type} class for the same task"
                    )
                    return getattr(transformers, name)
    name = modeling_auto.MODEL_MAPPING_NAMES.get(cfg.model_type)
    if isinstance(name, (list, tuple)):
        name = name[0]
    cls = getattr(transformers, name, None) if name else None
    if cls is None:
        raise ConfigError(f"transformers has no model class for model_type {cfg.model_type!r}", field="model_type")
    if architecture:
        notes.append(f"transformers has no class {architecture}; built the {cfg.model_type} base class {name}")
    else:
        notes.append(f"config names no architecture; built the {cfg.model_type} base class {name}")
    return cls


def build_from_config(raw: dict, where: str, *, attn_implementation: str | None = "sdpa") -> BuiltModel:
    transformers = _transformers()
    cfg = make_config(raw, where)
    notes: list[str] = []
    archs = raw.get("architectures") or []
    architecture = archs[0] if archs and isinstance(archs[0], str) else None
    cls = _pick_class(cfg, architecture, notes)
    if attn_implementation:
        try:
            cfg._attn_implementation = attn_implementation
        except Exception:
            pass
    try:
        with warnings.catch_warnings(), torch.device("meta"):
            warnings.simplefilter("ignore")
            model = cls(cfg)
    except (ValueError, AttributeError) as e:
        # sdpa unsupported by this class: retry with the class's default attention.
        if attn_implementation and "attn" in str(e).lower():
            return build_from_config(raw, where, attn_implementation=None)
        raise BuildError(f"building {cls.__name__} failed: {type(e).__name__}: {e}") from None
    except Exception as e:
        raise BuildError(f"building {cls.__name__} failed: {type(e).__name__}: {e}") from None
    model.eval()
    n = sum(p.numel() for p in model.parameters())
    if n > limits.MAX_PARAMETERS:
        raise LimitError(f"{where}: the config asks for {n:,} parameters, beyond neurarch's limit of {limits.MAX_PARAMETERS:,}")
    return BuiltModel(
        model=model,
        config=cfg,
        model_class=cls.__name__,
        library=f"transformers {transformers.__version__}",
        architecture=architecture,
        model_type=cfg.model_type,
        notes=notes,
    )


def build(source: ModelSource) -> BuiltModel:
    """Build the module a source describes, on the meta device."""
    if source.factory is not None:
        try:
            with warnings.catch_warnings(), torch.device("meta"):
                warnings.simplefilter("ignore")
                built = source.factory()
        except Exception as e:
            raise BuildError(f"building {source.id} failed: {type(e).__name__}: {e}") from None
        if isinstance(built, BuiltModel):
            return built
        if not isinstance(built, nn.Module):
            raise BuildError(f"{source.id}: the factory returned {type(built).__name__}, not an nn.Module")
        return BuiltModel(model=built.eval(), config=None, model_class=type(built).__name__, library=f"torch {torch.__version__}")
    if source.config is None:
        raise BuildError(f"{source.id}: the source has neither a config nor a factory")
    return build_from_config(source.config, source.id)
