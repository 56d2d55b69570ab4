"""Which fake inputs to feed a model, and at what shape.

The shape comes from the config where it says one (image size and channels,
mel bins, ...).  For text there is no right answer in the config — the
advertised context can be 128k tokens — so we use a documented default:

* ``DEFAULT_SEQ_LEN_DECODER = 2048`` tokens for models that generate text
  (a common fine-tuning length), and
* ``DEFAULT_SEQ_LEN_ENCODER = 512`` tokens for encoders (BERT's pre-training length),

each capped by the model's own position limit.  ``--seq-len``, ``--image-size``,
``--batch`` and ``--input-shape`` override; the report always prints what was used.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from . import limits
from .errors import InputError

DEFAULT_SEQ_LEN_DECODER = 2048
DEFAULT_SEQ_LEN_ENCODER = 512
DEFAULT_IMAGE_SIZE = 224
DEFAULT_AUDIO_SAMPLES = 16_000  # one second at 16 kHz


@dataclass
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    high: int | None = None  # token ids are drawn from [0, high)


@dataclass
class InputPlan:
    tensors: list[TensorSpec]
    main: str
    batch: int
    seq_len: int | None = None
    image_size: tuple[int, int] | None = None
    how: list[str] = field(default_factory=list)

    @property
    def main_shape(self) -> tuple[int, ...]:
        return next(t.shape for t in self.tensors if t.name == self.main)

    def make(self) -> dict[str, torch.Tensor]:
        """Materialise the inputs (call under FakeTensorMode: nothing is allocated)."""
        out = {}
        for t in self.tensors:
            if t.dtype.is_floating_point:
                out[t.name] = torch.randn(t.shape, dtype=t.dtype)
            elif t.high is not None:
                out[t.name] = torch.randint(0, max(t.high, 1), t.shape, dtype=t.dtype)
            else:
                out[t.name] = torch.ones(t.shape, dtype=t.dtype)
        return out


@dataclass
class InputOptions:
    batch: int = 1
    seq_len: int | None = None
    image_size: int | None = None
    input_shape: tuple[int, ...] | None = None

    def validate(self) -> None:
        limits.check_option("batch", self.batch, limits.MAX_BATCH)
        limits.check_option("seq_len", self.seq_len, limits.MAX_SEQ_LEN)
        limits.check_option("image_size", self.image_size, limits.MAX_IMAGE)
        if self.input_shape is not None:
            if not self.input_shape or any(d <= 0 for d in self.input_shape):
                raise InputError(f"--input-shape must be positive integers, got {','.join(map(str, self.input_shape))}")
            n = self.batch
            for d in self.input_shape:
                n *= d
            if n > limits.MAX_INPUT_ELEMENTS:
                raise InputError(f"--input-shape {self.input_shape} x batch {self.batch} is beyond neurarch's limit of {limits.MAX_INPUT_ELEMENTS:,} elements")


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(x) for x in text.replace("x", ",").split(",") if x.strip())
    except ValueError:
        raise InputError(f"--input-shape must look like 3,224,224 or 64, got {text!r}") from None
    if not dims:
        raise InputError(f"--input-shape must look like 3,224,224 or 64, got {text!r}")
    return dims


def _get(cfg: Any, *names: str, default=None):
    for n in names:
        v = getattr(cfg, n, None)
        if v is not None:
            return v
    return default


def _sub(cfg: Any, *names: str):
    for n in names:
        v = getattr(cfg, n, None)
        if v is not None and hasattr(v, "to_dict"):
            return v
    return None


def _hw(v) -> tuple[int, int]:
    if isinstance(v, (list, tuple)):
        return (int(v[0]), int(v[-1])) if len(v) >= 2 else (int(v[0]), int(v[0]))
    return int(v), int(v)


def _max_positions(cfg: Any) -> int | None:
    v = _get(cfg, "max_position_embeddings", "n_positions", "max_positions", "n_ctx", "max_seq_len", "seq_length")
    try:
        v = int(v)
    except (TypeError, ValueError):
        return None
    # Some configs use a sentinel (1e30 ...) for "no limit".
    return v if 0 < v < limits.MAX_SEQ_LEN else None


def _forward_params(model: nn.Module) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return {}


def _is_decoder(model: nn.Module, cfg: Any) -> bool:
    name = type(model).__name__
    return bool(
        getattr(cfg, "is_decoder", False)
        or name.endswith(("ForCausalLM", "LMHeadModel"))
        or getattr(cfg, "is_encoder_decoder", False)
        or "decoder" in (getattr(cfg, "model_type", "") or "")
    )


def _text_seq(model: nn.Module, cfg: Any, opts: InputOptions, how: list[str], text_cfg: Any = None) -> int:
    c = text_cfg if text_cfg is not None else cfg
    cap = _max_positions(c)
    if opts.seq_len is not None:
        if cap is not None and opts.seq_len > cap:
            how.append(f"--seq-len {opts.seq_len} exceeds the model's {cap} positions")
        else:
            how.append(f"seq_len {opts.seq_len} from --seq-len")
        return opts.seq_len
    default = DEFAULT_SEQ_LEN_DECODER if _is_decoder(model, cfg) else DEFAULT_SEQ_LEN_ENCODER
    if cap is not None and cap < default:
        how.append(f"seq_len {cap}: the model's max positions (default {default} capped)")
        return cap
    how.append(f"seq_len {default}: neurarch's default for {'decoders' if default == DEFAULT_SEQ_LEN_DECODER else 'encoders'}")
    return default


def _image(cfg: Any, opts: InputOptions, how: list[str]) -> tuple[int, tuple[int, int]]:
    vc = _sub(cfg, "vision_config") or cfg
    channels = int(_get(vc, "num_channels", "in_channels", "in_chans", default=3))
    if opts.image_size is not None:
        how.append(f"image {opts.image_size}x{opts.image_size} from --image-size")
        return channels, (opts.image_size, opts.image_size)
    size = _get(vc, "image_size", "img_size", "input_size")
    if isinstance(size, dict):  # {"height": .., "width": ..}
        size = (size.get("height"), size.get("width"))
    if size is None:
        how.append(f"image {DEFAULT_IMAGE_SIZE}x{DEFAULT_IMAGE_SIZE}: neurarch's default (the config gives no image_size)")
        return channels, (DEFAULT_IMAGE_SIZE, DEFAULT_IMAGE_SIZE)
    hw = _hw(size)
    how.append(f"image {hw[0]}x{hw[1]}, {channels} channels from the config")
    return channels, hw


def plan_inputs(model: nn.Module, cfg: Any, opts: InputOptions, default_shape: tuple[int, ...] | None = None) -> InputPlan:
    """Decide the forward inputs for a model."""
    opts.validate()
    b = opts.batch
    how: list[str] = [f"batch {b}" + (" from --batch" if b != 1 else "")]
    params = _forward_params(model)

    # A plain nn.Module (or --input-shape): one float tensor, batch first.
    if cfg is None or opts.input_shape is not None:
        shape = opts.input_shape or default_shape
        if shape is None:
            raise InputError("a plain nn.Module cannot tell its input: pass --input-shape (per sample, e.g. 3,224,224 or 64)")
        name = getattr(model, "main_input_name", None) if cfg is not None else None
        name = name if name in params else next(iter(params), "x")
        how.append(f"input shape {','.join(map(str, shape))} " + ("from --input-shape" if opts.input_shape else "from the model's defaults"))
        return InputPlan([TensorSpec(name, (b, *shape))], main=name, batch=b, how=how)

    main = getattr(model, "main_input_name", "input_ids")
    if main not in params and "input_ids" in params:
        main = "input_ids"
    tensors: list[TensorSpec] = []
    seq = None
    image = None
    text_cfg = _sub(cfg, "text_config")
    vocab = int(_get(text_cfg or cfg, "vocab_size", default=1000) or 1000)

    if main == "pixel_values" or (main not in params and "pixel_values" in params):
        ch, image = _image(cfg, opts, how)
        tensors.append(TensorSpec("pixel_values", (b, ch, *image)))
        main = "pixel_values"
        if "input_ids" in params and text_cfg is not None:  # CLIP-like: a text side too
            seq = _text_seq(model, cfg, opts, how, text_cfg)
            tensors.append(TensorSpec("input_ids", (b, seq), torch.long, vocab))
    elif main == "input_features":
        mel = int(_get(cfg, "num_mel_bins", "feature_size", "input_feat_per_channel", default=80))
        frames = int(_get(cfg, "max_source_positions", default=1500)) * 2
        if opts.seq_len:
            frames = opts.seq_len
        tensors.append(TensorSpec("input_features", (b, mel, frames)))
        how.append(f"audio features {mel} mel bins x {frames} frames from the config")
        seq = frames
    elif main == "input_values":
        samples = opts.seq_len or DEFAULT_AUDIO_SAMPLES
        tensors.append(TensorSpec("input_values", (b, samples)))
        how.append(f"audio {samples} samples" + (" from --seq-len" if opts.seq_len else " (one second at 16 kHz, neurarch's default)"))
        seq = samples
    else:
        main = "input_ids" if "input_ids" in params else main
        seq = _text_seq(model, cfg, opts, how, text_cfg)
        tensors.append(TensorSpec(main, (b, seq), torch.long, vocab))
        if "pixel_values" in params and _sub(cfg, "vision_config") is not None:
            ch, image = _image(cfg, opts, how)
            tensors.append(TensorSpec("pixel_values", (b, ch, *image)))

    if getattr(cfg, "is_encoder_decoder", False) and "decoder_input_ids" in params:
        dec_cfg = _sub(cfg, "decoder") or cfg
        dec_seq = seq if main == "input_ids" else _text_seq(model, dec_cfg, opts, [], None)
        cap = _max_positions(dec_cfg)
        if cap is not None:
            dec_seq = min(dec_seq, cap)
        dec_vocab = int(_get(dec_cfg, "vocab_size", default=vocab) or vocab)
        tensors.append(TensorSpec("decoder_input_ids", (b, dec_seq), torch.long, dec_vocab))
        how.append(f"decoder_input_ids of {dec_seq} tokens")

    for t in tensors:
        n = 1
        for d in t.shape:
            n *= d
        if n > limits.MAX_INPUT_ELEMENTS:
            raise InputError(f"input {t.name} {t.shape} is beyond neurarch's limit of {limits.MAX_INPUT_ELEMENTS:,} elements")
    return InputPlan(tensors, main=main, batch=b, seq_len=seq if main != "pixel_values" else None, image_size=image, how=how)
