"""Stage 1 of the pipeline: turn what the user typed into a :class:`ModelSource`.

Resolution order (the report says which one was used):

1. ``timm:NAME``, ``torchvision:NAME``, ``python:FILE.py:Factory`` prefixes;
2. a local path: a ``config.json`` or a folder holding one (plus safetensors headers);
3. the bundled offline catalog;
4. the Hugging Face Hub (``config.json`` and safetensors headers, never weights).
"""

from __future__ import annotations

import re
from pathlib import Path

from .. import limits
from ..errors import ConfigError, RemoteCodeError, SourceNotFoundError
from ..limits import show
from .base import CheckpointInfo, ModelSource

__all__ = ["resolve", "ModelSource", "CheckpointInfo", "check_remote_code", "native_build"]

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")


def _looks_like_path(spec: str) -> bool:
    return spec.startswith((".", "/", "~")) or spec.endswith(".json") or spec.count("/") > 1 or "\\" in spec


# auto_map keys that load tokenizers or processors: neurarch never loads those.
_NOT_MODEL_CODE = ("AutoTokenizer", "AutoProcessor", "AutoImageProcessor", "AutoFeatureExtractor", "AutoVideoProcessor")


def native_build(config: dict) -> str | None:
    """The transformers class that builds this config natively, or None when only the repo's code can.

    A repo may ship its own code (``auto_map``) for a model that transformers has
    since taken in (Phi-3, DeepSeek-V3): without ``trust_remote_code``
    transformers then builds its own class, and so does neurarch.  That holds
    only when ``model_type`` is one transformers knows, ``architectures[0]`` is a
    transformers class for that model type, and every model class the
    ``auto_map`` names is one of transformers' own for that model type (a repo
    whose auto_map names classes transformers lacks has a model of its own).
    """
    return _native(config)[0]


def _native(config: dict) -> tuple[str | None, str]:
    """(the native class name or None, why not)."""
    model_type = config.get("model_type")
    archs = config.get("architectures")
    import transformers
    from torch import nn
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        return None, f"its config has an auto_map and transformers has no model_type {show(model_type)}"
    config_class = CONFIG_MAPPING[model_type]

    def ours(name: object, want_config: bool) -> bool:
        if not isinstance(name, str) or not name.isidentifier():
            return False
        try:
            cls = getattr(transformers, name, None)
        except Exception:  # noqa: BLE001 - transformers' lazy module may fail to import an optional class
            return False
        if not isinstance(cls, type):
            return False
        if want_config:
            return cls is config_class
        own = getattr(cls, "config_class", None)
        return issubclass(cls, nn.Module) and isinstance(own, type) and issubclass(config_class, own)

    if not isinstance(archs, list) or not archs or not ours(archs[0], want_config=False):
        return None, f"its config has an auto_map and architectures[0] is not a transformers {model_type} class"
    auto_map = config.get("auto_map")
    if auto_map is not None:
        if not isinstance(auto_map, dict):
            return None, "its config has an auto_map that is not an object"
        for key, target in auto_map.items():
            if not isinstance(key, str) or key.startswith(_NOT_MODEL_CODE):
                continue
            name = target.rsplit(".", 1)[-1] if isinstance(target, str) else None
            if not ours(name, want_config=key == "AutoConfig"):
                return None, f"its config's auto_map names {show(target)} for {show(key)}, which transformers does not have"
    return archs[0], ""


def check_architecture(config: dict, model_id: str) -> None:
    """Refuse an ``architectures[0]`` that names a transformers class that is not a model.

    Names transformers lacks are left to the build (it falls back to the class
    for the same task and says so); a name that resolves to an abstract base
    (``PreTrainedModel``, ``LlamaPreTrainedModel``) or to a layer or helper
    class would be built as if it were the model.
    """
    archs = config.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str) or not archs[0].isidentifier():
        return
    import transformers
    from torch import nn

    try:
        cls = getattr(transformers, archs[0], None)
    except Exception:  # noqa: BLE001 - transformers' lazy module may fail to import an optional class
        return
    if not isinstance(cls, type) or not issubclass(cls, nn.Module):
        return
    if not issubclass(cls, transformers.PreTrainedModel):
        why = "is a layer class, not a model"
    elif cls is transformers.PreTrainedModel or cls.__name__.endswith("PreTrainedModel"):
        why = "is the abstract base of a model family, not a model"
    else:
        return
    raise ConfigError(f"{model_id}: field architectures[0] = {archs[0]!r} {why}", path=model_id, field="architectures[0]")


def check_remote_code(config: dict, model_id: str, trust_remote_code: bool) -> list[str]:
    """Refuse configs that need code from the model repo unless the user allowed it.

    Returns the notes to add to the report: when the repo ships code that
    transformers has natively, the native class is built and the note says so.
    """
    auto_map = config.get("auto_map")
    if not auto_map:
        if config.get("trust_remote_code") and not trust_remote_code:
            raise RemoteCodeError(model_id, "its config sets trust_remote_code")
        return []
    native, why = _native(config)
    if native is not None:
        return [f"the repo's own code (auto_map) was not used: transformers' native {config['model_type']} implementation was built ({native})"]
    if not trust_remote_code:
        raise RemoteCodeError(model_id, why)
    return []


def resolve(
    spec: str,
    *,
    revision: str | None = None,
    trust_remote_code: bool = False,
    offline: bool | None = None,
) -> ModelSource:
    """Resolve a model spec to a source.  Raises a NeurarchError subclass on failure."""
    spec = spec.strip()
    if not spec:
        raise SourceNotFoundError(spec, "empty model name")
    if spec.startswith(("timm:", "torchvision:")):
        from . import vision

        return vision.load(spec)
    if spec.startswith("python:"):
        from . import python_file

        return python_file.load(spec, trust_remote_code=trust_remote_code)

    path = Path(spec).expanduser()
    if path.exists():
        from . import local

        src = local.load(path)
    elif _looks_like_path(spec):
        raise SourceNotFoundError(spec, "no such file or folder")
    else:
        from . import catalog

        bundled = catalog.load(spec) if revision is None else None
        if bundled is not None:
            src = bundled
        else:
            if not HUB_ID.match(spec):
                raise SourceNotFoundError(spec, "not a path, a catalog id or a Hugging Face model id")
            from . import hub

            src = hub.load(spec, revision=revision, offline=offline)
    if src.config is not None:
        limits.check_config(src.config, src.id)
        check_architecture(src.config, src.id)
        src.notes.extend(check_remote_code(src.config, src.id, trust_remote_code))
    return src
