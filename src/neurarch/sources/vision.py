"""``timm:NAME`` and ``torchvision:NAME`` — models from the two vision registries.

The source holds a *factory* that builds the model without weights
(``timm.create_model(name, pretrained=False)``; torchvision's builder with
its weights' download intercepted); :func:`neurarch.build.build`
calls it under ``torch.device("meta")``, so nothing is allocated or downloaded
(for torchvision see below: the default weights' architecture, not its weights).

The per-sample input shape comes from what each library publishes:

* timm: the ``input_size`` of the model's ``pretrained_cfg`` (for the
  default tag, or the tag in ``timm:resnet50.a1h_in1k``);
* torchvision: the eval transforms of the default weights enum
  (``crop_size`` for classification and video, ``resize_size`` for
  segmentation; video clips are ``clip_len`` frames, as the weights' docs say);
* otherwise neurarch's 224 default, and the notes say so.

No checkpoint is read (the weights live on the network), so the report's
checkpoint count is ``None``.  torchvision publishes each weight's
parameter count in its weights metadata; we repeat it in the notes so the
reader can compare it with the derived count.  To make that comparison fair
the model is built the way the *default weights* shape it (a builder given
``weights=`` sets the class count, image size, frozen BatchNorm or auxiliary
heads those weights need), with the download and the load skipped; when
that fails, and for quantized models, we fall back to ``weights=None`` and say so.

A few constructors compute layer sizes with tensor arithmetic
(torchvision's RegNet: ``torch.arange(...).tolist()``), which has no data on
the meta device.  For those we rebuild with CPU as the default device while
moving every parameter and buffer to meta the moment a module registers it
(the trick ``accelerate.init_empty_weights`` uses), and say so in the notes.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import inspect
import re
import warnings
from typing import Any, Callable

import torch
from torch import nn

from ..errors import SourceNotFoundError, VisionUnavailableError
from .base import Factored, ModelSource

INSTALL_HINT = "pip install torch==2.14.1 torchvision==0.29.1 && pip install -e '.[vision]'"
DEFAULT_SIZE = 224
DEFAULT_CLIP_LEN = 16  # frames per video clip when the weights' docs do not say


def _import(library: str):
    """Import timm or torchvision, turning any failure into one clear line.

    A torchvision built for another torch fails with RuntimeError or
    AttributeError rather than ImportError, so every exception is caught.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module(library)
    except Exception as e:
        detail = "not installed" if isinstance(e, ModuleNotFoundError) else f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        raise VisionUnavailableError(library, f"{detail}; install the vision extra: {INSTALL_HINT}") from None


def _unknown(spec: str, name: str, known: list[str], library: str) -> SourceNotFoundError:
    close = difflib.get_close_matches(name, known, n=5, cutoff=0.6)
    hint = f"; close matches: {', '.join(close)}" if close else ""
    return SourceNotFoundError(spec, f"{library} has no model {name!r}{hint}")


# --- building on meta ---------------------------------------------------------


@contextlib.contextmanager
def _parameters_on_meta():
    """While active, every parameter/buffer a module registers is moved to meta.

    Tensors that are not registered (the tensor arithmetic a constructor does
    to work out its widths) stay on the default device and keep their data.
    """
    register_parameter = nn.Module.register_parameter
    register_buffer = nn.Module.register_buffer

    def on_meta_parameter(module, name, param):
        register_parameter(module, name, param)
        if param is not None and param.device.type != "meta":
            p = module._parameters[name]
            moved = type(p)(p.detach().to("meta"), requires_grad=p.requires_grad)
            moved.__dict__.update(p.__dict__)  # attributes libraries hang on parameters
            module._parameters[name] = moved

    def on_meta_buffer(module, name, tensor, persistent=True):
        register_buffer(module, name, tensor, persistent=persistent)
        if tensor is not None and tensor.device.type != "meta":
            module._buffers[name] = module._buffers[name].to("meta")

    nn.Module.register_parameter = on_meta_parameter
    nn.Module.register_buffer = on_meta_buffer
    try:
        yield
    finally:
        nn.Module.register_parameter = register_parameter
        nn.Module.register_buffer = register_buffer


def _needs_data(e: Exception) -> bool:
    """True for the errors a constructor raises when it reads values of a meta tensor."""
    text = str(e).lower()
    return "meta" in text and any(k in text for k in ("no data", "item()", "cannot be called on meta", "copy out of meta"))


def _meta_factory(library: str, make: Callable[[list[str]], nn.Module], arch: str) -> Callable[[], Any]:
    """A factory returning a BuiltModel: ``make(notes)`` on meta, with the fallback above."""

    def factory():
        notes: list[str] = []
        try:
            model = make(notes)  # build.build() has torch.device("meta") active
        except Exception as e:
            if not _needs_data(e):
                raise
            notes.clear()
            with torch.device("cpu"), _parameters_on_meta():
                model = make(notes)
            notes.append(
                f"{arch}'s constructor computes its sizes from tensor values, which meta tensors lack: built with the "
                "CPU as default device and every parameter and buffer moved to meta as it was registered"
            )
        return Factored(model=model.eval(), library=library, architecture=arch, notes=notes)

    return factory


# --- timm ---------------------------------------------------------------------


def _load_timm(spec: str, name: str) -> ModelSource:
    timm = _import("timm")
    from timm.models import get_pretrained_cfg, is_model, split_model_name_tag

    arch, tag = split_model_name_tag(name)
    if not is_model(arch):
        raise _unknown(spec, arch, timm.list_models(), f"timm {timm.__version__}")
    try:
        cfg = get_pretrained_cfg(name)
    except RuntimeError:  # a tag the architecture does not have
        tags = [t.split(".", 1)[1] for t in timm.list_pretrained(f"{arch}.*")]
        close = difflib.get_close_matches(tag, tags, n=5, cutoff=0.4) or tags[:8]
        raise SourceNotFoundError(spec, f"timm has no pretrained tag {tag!r} for {arch}; tags: {', '.join(close)}") from None

    notes: list[str] = []
    input_size = tuple(getattr(cfg, "input_size", None) or ())
    if len(input_size) == 3 and all(isinstance(d, int) and d > 0 for d in input_size):
        shape = input_size
        which = f"{arch}.{cfg.tag}" if getattr(cfg, "tag", None) else arch
        notes.append(f"input {'x'.join(map(str, shape))} from timm's pretrained_cfg input_size for {which}")
    else:
        shape = (3, DEFAULT_SIZE, DEFAULT_SIZE)
        notes.append(f"timm registers no input_size for {name}: input 3x{DEFAULT_SIZE}x{DEFAULT_SIZE}, neurarch's default")
    notes.append("built with pretrained=False: sized by the pretrained_cfg, no weights read")

    def make(build_notes: list[str]):
        # pretrained=False reads no weights, but timm still sizes the model
        # (classes, image size) from the tag's pretrained_cfg: the published architecture.
        return timm.create_model(name, pretrained=False)

    return ModelSource(
        id=spec,
        kind="timm",
        provenance=f"timm {timm.__version__} model registry",
        factory=_meta_factory(f"timm {timm.__version__}", make, arch),
        default_input_shape=shape,
        notes=notes,
    )


# --- torchvision --------------------------------------------------------------


def _size(value) -> tuple[int, int] | None:
    """(h, w) from a transforms size: [224], [128, 171] or an int."""
    if isinstance(value, int):
        return value, value
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) for v in value):
        return (value[0], value[0]) if len(value) == 1 else (value[0], value[1])
    return None


class _NoWeights(dict):
    """The empty state dict handed to a builder in place of the real download."""


@contextlib.contextmanager
def _no_weight_download(models):
    """Let a builder take ``weights=...`` without downloading or loading anything.

    Given a weights enum, torchvision builders shape the model the way those
    weights need (number of classes, image size, frozen BatchNorm in
    detection backbones, auxiliary heads) and then call
    ``model.load_state_dict(weights.get_state_dict(...))``.  We answer
    ``get_state_dict`` with an empty :class:`_NoWeights` and make
    ``load_state_dict`` skip exactly that object, so the architecture is the
    published one and no weight is read.
    """
    weights_enum = models._api.WeightsEnum
    get_state_dict = weights_enum.get_state_dict
    load_state_dict = nn.Module.load_state_dict

    def skip_no_weights(module, state_dict, *args, **kwargs):
        if isinstance(state_dict, _NoWeights):
            return None
        return load_state_dict(module, state_dict, *args, **kwargs)

    weights_enum.get_state_dict = lambda self, *a, **k: _NoWeights()
    nn.Module.load_state_dict = skip_no_weights
    try:
        yield
    finally:
        weights_enum.get_state_dict = get_state_dict
        nn.Module.load_state_dict = load_state_dict


def _torchvision_shape(models, name: str) -> tuple[tuple[int, ...], str, Any]:
    """Per-sample input shape from the default weights' eval transforms, with how."""
    try:
        weights = models.get_model_weights(name).DEFAULT
        transforms = weights.transforms()
    except Exception:
        return (3, DEFAULT_SIZE, DEFAULT_SIZE), f"torchvision has no default weights for {name}: input 3x{DEFAULT_SIZE}x{DEFAULT_SIZE}, neurarch's default", None
    kind = type(transforms).__name__
    crop = _size(getattr(transforms, "crop_size", None))
    resize = _size(getattr(transforms, "resize_size", None))
    where = f"{weights} transforms ({kind})"
    if kind == "VideoClassification" and crop:
        m = re.search(r"clip_len=(\d+)", weights.meta.get("_docs", ""))
        frames = int(m.group(1)) if m else DEFAULT_CLIP_LEN
        said = "clip_len from the weights' docs" if m else "neurarch's default clip length"
        return (3, frames, *crop), f"input 3x{frames}x{crop[0]}x{crop[1]}: crop_size of {where}, {frames} frames ({said})", weights
    if crop:
        return (3, *crop), f"input 3x{crop[0]}x{crop[1]}: crop_size of {where}", weights
    if kind == "SemanticSegmentation" and resize:
        return (3, *resize), f"input 3x{resize[0]}x{resize[1]}: resize_size of {where}", weights
    how = f"{where} give no fixed size: input 3x{DEFAULT_SIZE}x{DEFAULT_SIZE}, neurarch's default"
    if kind == "ObjectDetection":
        how += " (detection models resize inside forward)"
    elif kind == "OpticalFlow":
        how += " (optical-flow models take two images; neurarch passes one)"
    return (3, DEFAULT_SIZE, DEFAULT_SIZE), how, weights


def _load_torchvision(spec: str, name: str) -> ModelSource:
    torchvision = _import("torchvision")
    models = torchvision.models
    known = models.list_models()
    name = name.lower()  # get_model() lower-cases too
    if name not in known:
        raise _unknown(spec, name, known, f"torchvision {torchvision.__version__}")
    builder = models.get_model_builder(name)

    # Detection/segmentation builders default to downloading an ImageNet
    # backbone (weights_backbone): always off.
    extra: dict[str, Any] = {}
    try:
        if "weights_backbone" in inspect.signature(builder).parameters:
            extra["weights_backbone"] = None
    except (TypeError, ValueError):
        pass

    shape, how, weights = _torchvision_shape(models, name)
    notes = [how]
    n_params = weights.meta.get("num_params") if weights is not None else None
    if isinstance(n_params, int):
        notes.append(f"torchvision publishes num_params {n_params:,} for {weights} (parameters only, buffers excluded)")

    quantized = name.startswith("quantized_")

    def make(build_notes: list[str]):
        if quantized:
            # Quantized weights need quantize=True, which calibrates on real data.
            build_notes.append("built the float, quantizable model (weights=None): quantizing needs real data")
        elif weights is not None:
            try:
                with _no_weight_download(models):
                    model = builder(weights=weights, **extra)
                build_notes.append(f"built the architecture of {weights} without reading its weights")
                return model
            except Exception as e:
                if _needs_data(e):
                    raise  # _meta_factory retries the whole build
                build_notes.append(f"building as {weights} failed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); built with weights=None, the builder's untrained defaults")
        else:
            build_notes.append("built with weights=None, the builder's untrained defaults")
        return builder(weights=None, **extra)

    return ModelSource(
        id=spec,
        kind="torchvision",
        provenance=f"torchvision {torchvision.__version__} model registry",
        factory=_meta_factory(f"torchvision {torchvision.__version__}", make, name),
        default_input_shape=shape,
        notes=notes,
    )


def load(spec: str) -> ModelSource:
    """Resolve ``timm:NAME`` or ``torchvision:NAME`` to a source with a meta factory."""
    library, _, name = spec.partition(":")
    name = name.strip()
    if not name:
        raise SourceNotFoundError(spec, f"no model name after {library}: (e.g. {library}:resnet50)")
    if library == "timm":
        if ":" in name:  # hf-hub:..., local-dir:... load configs or weights from elsewhere
            raise SourceNotFoundError(spec, "timm: takes a registry name such as resnet50 or vit_small_patch14_dinov2")
        return _load_timm(spec, name)
    if library == "torchvision":
        return _load_torchvision(spec, name)
    raise SourceNotFoundError(spec, "expected timm:NAME or torchvision:NAME")
