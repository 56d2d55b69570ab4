"""Stage 2: build the real module from a source, on the meta device.

No weights are read and no memory is allocated: every parameter is a meta
tensor (shape and dtype only).  Small *buffers* (a rotary ``inv_freq``, a
conv's stride kept as a tensor, position ids) are built for real on the CPU
instead (see :func:`small_on_cpu`): model code sometimes reads their values,
and a meta buffer has none.  For transformers configs we build the class
the config names in ``architectures[0]``; when the installed transformers does
not have it we fall back to the class for the same task, or the model type's
base class, and say so in the notes.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

import torch
from torch import nn
from torch.utils._device import DeviceContext, _device_constructors

from . import limits
from .errors import BuildError, ConfigError, LimitError
from .options import TASKS as OPTION_TASKS
from .sources.base import Factored, ModelSource

if TYPE_CHECKING:
    from .options import PlanOptions

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


# --task: the head a user fine-tunes -> transformers' auto-mappings that serve it, in order.
TASKS = {
    "causal-lm": ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",),
    "seq-cls": ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES"),
    "token-cls": ("MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",),
    "masked-lm": ("MODEL_FOR_MASKED_LM_MAPPING_NAMES",),
    "seq2seq-lm": ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",),
    "backbone": ("MODEL_MAPPING_NAMES",),
}


assert tuple(TASKS) == OPTION_TASKS, "build.TASKS and options.TASKS list the same tasks"


def task_class(cfg, task: str):
    """The transformers class that fine-tunes ``cfg``'s model type for ``task``."""
    transformers = _transformers()
    from transformers.models.auto import modeling_auto

    for mapping_name in TASKS[task]:
        name = getattr(modeling_auto, mapping_name, {}).get(cfg.model_type)
        if isinstance(name, (list, tuple)):
            name = name[0]
        cls = getattr(transformers, name, None) if name else None
        if isinstance(cls, type):
            return cls
    raise ConfigError(f"--task {task}: transformers {transformers.__version__} has no {task} class for model_type {cfg.model_type!r}", field="task")


# Tensors up to this many elements are created for real during the build (4 MB in
# float32); parameters are moved to meta the moment they are registered.
SMALL_TENSOR = 1 << 20


def _size_numel(args, kwargs) -> int | None:
    size = kwargs.get("size")
    if size is None and args:
        size = args[0] if isinstance(args[0], (list, tuple, torch.Size)) else args
    try:
        return math.prod(int(d) for d in size)
    except (TypeError, ValueError):
        return None


def _constructor_numel(func, args, kwargs) -> int | None:
    """Elements a tensor constructor call will make (None: cannot tell, treat as big)."""
    try:
        if func in (torch.tensor, torch.as_tensor, torch.asarray, torch.scalar_tensor):
            data = args[0] if args else kwargs.get("data")
            return int(data.numel()) if isinstance(data, torch.Tensor) else 1
        if func in (torch.arange, torch.range):
            nums = [float(a) for a in args if isinstance(a, (int, float))]
            start, end, step = (0.0, nums[0], 1.0) if len(nums) == 1 else (nums + [1.0])[:3]
            return max(int(math.ceil((end - start) / step)), 0) + 1
        if func in (torch.linspace, torch.logspace):
            return int(kwargs.get("steps", args[2] if len(args) > 2 else 100))
        if func is torch.eye:
            n = int(args[0])
            return n * int(args[1]) if len(args) > 1 and isinstance(args[1], int) else n * n
        if func in (torch.full, torch.empty_strided):
            return _size_numel(args[:1], kwargs)
        if func is torch.randint:
            size = kwargs.get("size") or next((a for a in args if isinstance(a, (list, tuple, torch.Size))), None)
            return _size_numel((size,), {}) if size is not None else None
        if func is torch.randperm:
            return int(args[0])
        if func in (torch.empty, torch.zeros, torch.ones, torch.rand, torch.randn, torch.empty_permuted):
            return _size_numel(args, kwargs)
    except (TypeError, ValueError, IndexError):
        return None
    return None


class _SmallOnCpu(DeviceContext):
    """``torch.device("meta")``, except that small new tensors are real, on the CPU."""

    def __init__(self):
        super().__init__("meta")

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _device_constructors() and kwargs.get("device") is None:
            n = _constructor_numel(func, args, kwargs)
            kwargs["device"] = "cpu" if n is not None and n <= SMALL_TENSOR else "meta"
        return func(*args, **kwargs)


@contextlib.contextmanager
def small_on_cpu():
    """Build context: parameters and big tensors on meta, small buffers real on the CPU."""
    original = nn.Module.register_parameter

    def register_parameter(self, name, param):
        if param is not None and param.device.type != "meta":
            param = nn.Parameter(param.detach().to("meta"), requires_grad=param.requires_grad)
        return original(self, name, param)

    nn.Module.register_parameter = register_parameter
    try:
        with _SmallOnCpu():
            yield
    finally:
        nn.Module.register_parameter = original


def _on_meta_only(model: nn.Module) -> bool:
    return all(p.device.type == "meta" for p in model.parameters())


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
            f"{where}: unknown model_type {model_type!r}: transformers {transformers.__version__} does not know it (if the repo ships its own code, see --trust-remote-code)",
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
                    notes.append(f"transformers {transformers.__version__} has no class {architecture}; built {name}, the {cfg.model_type} class for the same task")
                    return getattr(transformers, name)
    found = modeling_auto.MODEL_MAPPING_NAMES.get(cfg.model_type)
    name = found[0] if isinstance(found, (list, tuple)) else found
    cls = getattr(transformers, name, None) if isinstance(name, str) and name else None
    if cls is None:
        raise ConfigError(f"transformers has no model class for model_type {cfg.model_type!r}", field="model_type")
    if architecture:
        notes.append(f"transformers has no class {architecture}; built the {cfg.model_type} base class {name}")
    else:
        notes.append(f"config names no architecture; built the {cfg.model_type} base class {name}")
    return cls


def _instantiate(cls, cfg) -> nn.Module:
    """``cls(cfg)`` with small buffers real (their values are read by some models); if the
    class's code cannot mix CPU and meta tensors in its constructor, all on meta."""
    try:
        with warnings.catch_warnings(), small_on_cpu():
            warnings.simplefilter("ignore")
            model = cls(cfg)
        if _on_meta_only(model):
            return model
    except Exception:
        pass
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        return cls(cfg)


def build_from_config(raw: dict, where: str, *, attn_implementation: str | None = "sdpa", task: str | None = None, num_labels: int | None = None, strict_attention: bool = False) -> BuiltModel:
    """The model ``raw`` describes, on meta.

    ``attn_implementation``: transformers' name; "sdpa" (the default) is what
    transformers picks on a CUDA card where the class supports it, and a class
    that does not gets its own default (eager) unless ``strict_attention``.
    ``task``/``num_labels``: build the head a user fine-tunes instead of
    ``architectures[0]`` (see :data:`TASKS`).
    """
    transformers = _transformers()
    cfg = make_config(raw, where)
    notes: list[str] = []
    archs = raw.get("architectures") or []
    architecture = archs[0] if archs and isinstance(archs[0], str) else None
    if task is not None:
        cls = task_class(cfg, task)
        if task in ("seq-cls", "token-cls") and num_labels:
            cfg.num_labels = num_labels
        if task == "seq-cls" and getattr(cfg, "pad_token_id", None) is None and hasattr(cfg, "pad_token_id"):
            # Sequence classifiers find each row's last token through pad_token_id; fine-tuning
            # recipes set it (to the EOS id) before training at a batch above 1.
            eos = getattr(cfg, "eos_token_id", None)
            cfg.pad_token_id = (eos[0] if isinstance(eos, (list, tuple)) and eos else eos) if eos is not None else 0
            notes.append(f"the config has no pad_token_id; set to {cfg.pad_token_id} (the EOS id) as fine-tuning recipes do")
    else:
        cls = _pick_class(cfg, architecture, notes)
    if attn_implementation:
        try:
            cfg._attn_implementation = attn_implementation
        except Exception:
            pass
    try:
        model = _instantiate(cls, cfg)
    except (ValueError, AttributeError, ImportError) as e:
        # sdpa unsupported by this class: retry with the class's default attention.
        if attn_implementation and not strict_attention and "attn" in str(e).lower():
            return build_from_config(raw, where, attn_implementation=None, task=task, num_labels=num_labels)
        if attn_implementation and "attn" in str(e).lower():
            raise BuildError(f"{cls.__name__} cannot run attn_implementation={attn_implementation!r}: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}") from None
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
        if isinstance(built, BuiltModel):  # a python: factory may describe its model itself
            return built
        if isinstance(built, Factored):
            return BuiltModel(model=built.model, config=None, model_class=type(built.model).__name__, library=built.library, architecture=built.architecture, notes=built.notes)
        if not isinstance(built, nn.Module):
            raise BuildError(f"{source.id}: the factory returned {type(built).__name__}, not an nn.Module")
        return BuiltModel(model=built.eval(), config=None, model_class=type(built).__name__, library=f"torch {torch.__version__}")
    if source.config is None:
        raise BuildError(f"{source.id}: the source has neither a config nor a factory")
    return build_from_config(source.config, source.id)


class Attention(NamedTuple):
    """The attention a training step runs: transformers' name (None for plain modules), why, and the class."""

    used: Optional[str] = None
    how: str = ""
    model_class: Optional[str] = None


def attention_of(model: nn.Module) -> Optional[str]:
    """The attention implementation a transformers model runs (None for plain modules)."""
    cfg = getattr(model, "config", None)
    return getattr(cfg, "_attn_implementation", None) if cfg is not None else None


def recipe_model(built: BuiltModel, source: ModelSource, plan: Optional[PlanOptions]) -> tuple[BuiltModel, Attention]:
    """The model a training step runs under ``plan``'s recipe, and its :class:`Attention`.

    The trace and the checkpoint comparison keep the published architecture
    (``built``) with transformers' default attention on CUDA (SDPA where the
    class has it); ``--task`` and ``--attn-implementation`` build the recipe's
    model beside it.  An attention the class cannot run is an
    :class:`~neurarch.errors.InputError`.
    """
    from .errors import InputError

    task = plan.task if plan is not None else None
    want = plan.attn_implementation if plan is not None else None
    trained = built
    if built.config is not None and source.config is not None and (task is not None or want not in (None, "sdpa", "flash_attention_2")):
        num_labels = plan.num_labels if plan is not None else None
        trained = build_from_config(source.config, source.id, attn_implementation="eager" if want == "eager" else "sdpa", task=task, num_labels=num_labels, strict_attention=want is not None)
    elif built.config is None and (task is not None or want is not None):
        raise InputError("--task and --attn-implementation apply to transformers models only")
    used = attention_of(trained.model)
    if want is None:
        how = ("what transformers picks on a CUDA card" + ("" if used == "sdpa" else ": this class has no SDPA path")) if used else ""
    elif want == "flash_attention_2":
        if not getattr(type(trained.model), "_supports_flash_attn", False):
            raise InputError(f"{trained.model_class} does not support flash_attention_2 in transformers")
        if used != "sdpa":
            raise InputError(f"{trained.model_class} has no SDPA path to model flash_attention_2 on")
        used, how = "flash_attention_2", ("--attn-implementation flash_attention_2, simulated with CUDA's flash kernel (the flash-attn package itself needs CUDA to install)")
    else:
        if used != want:
            raise InputError(f"{trained.model_class} cannot run attn_implementation={want!r} (it runs {used!r})")
        how = f"--attn-implementation {want}"
    return trained, Attention(used, how, trained.model_class)
