"""Which fake inputs to feed a model, and at what shape.

The planner reads the model's ``forward`` signature and its config — never a
per-architecture table — and synthesises one tensor per input the forward
needs: its main input (``main_input_name`` when the forward takes it), the
required arguments, and the companions a kind of model cannot run without
(the image of a vision-language model, the grid of a Qwen-style vision
tower, the decoder tokens of an encoder-decoder).

Shapes come from the config where it says one (image size and channels,
mel bins, context length, patch grid, ...).  Where it does not, we use
documented defaults:

* text: ``DEFAULT_SEQ_LEN_DECODER = 2048`` tokens for models that generate
  text (a common fine-tuning length) and ``DEFAULT_SEQ_LEN_ENCODER = 512``
  for encoders (BERT's pre-training length), each capped by the model's own
  position limit (``max_position_embeddings`` and kin);
  ``DEFAULT_SEQ_LEN_STEPWISE = 32`` for recurrent models whose reference
  PyTorch code steps through the sequence one token at a time in Python
  (see :func:`stepwise_recurrent`: Mamba, Jamba, Zamba, RWKV), whose trace
  costs every op once per token; their layers are the same at any length;
* images: the config's ``image_size``, else ``DEFAULT_IMAGE_SIZE = 224``;
  video: ``num_frames`` from the config, else ``DEFAULT_VIDEO_FRAMES = 16``;
* raw audio (``input_values``): ``DEFAULT_AUDIO_SAMPLES = 16000`` (one second
  at 16 kHz); audio features (``input_features``): the mel bins of the config
  by ``2 * max_source_positions`` frames when the config has them (Whisper:
  80 x 3000, 30 s), else ``DEFAULT_AUDIO_FRAMES = 1000`` (10 s at a 10 ms hop);
* time series: ``context_length`` (+ the largest lag) steps from the config;
* a vision-language model gets one image per sample; its text holds exactly
  as many image tokens as the model makes image features (counted by calling
  the model's own ``get_image_features`` on the fake image, see
  :meth:`InputPlan.resolve`), and the text is lengthened if they do not fit.

* a decoder that generates text is "decoding" when its class says so
  (``...ForCausalLM``/``ForConditionalGeneration``), its config is a decoder
  or encoder-decoder, or it has a text sub-config; encoder-decoders get
  decoder tokens as long as the text, capped by the decoder's positions.

Token ids avoid every special id the config names (pad, bos, eos, image...),
and are drawn from a fixed-seed generator.  A training step is traced with
``use_cache=False``.  Where a layout cannot be told from the config (audio
features bins- or frames-first, raw audio with or without a channel axis, one
image or a pair, integer or float boxes) the plan carries
:class:`Alternative` layouts, tried in order when the first one fails.

``--seq-len``, ``--image-size``, ``--batch`` and ``--input-shape`` override;
the report always prints what was used (``InputPlan.how``).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from . import limits
from .errors import InputError

DEFAULT_SEQ_LEN_DECODER = 2048
DEFAULT_SEQ_LEN_ENCODER = 512
DEFAULT_SEQ_LEN_STEPWISE = 32
DEFAULT_IMAGE_SIZE = 224
DEFAULT_VIDEO_FRAMES = 16
DEFAULT_AUDIO_SAMPLES = 16_000  # one second at 16 kHz
DEFAULT_AUDIO_FRAMES = 1000  # ten seconds of 10 ms feature frames
DEFAULT_QUERY_TOKENS = 32  # a Q-Former prompt
DEFAULT_TIME_STEPS = 512
DEFAULT_ENCODER_STATES = 257  # states a lone cross-attending tower attends to: (224 / 14)^2 patches + [CLS]
DEFAULT_VISUAL_REGIONS = 36  # detector boxes per image fed to region-feature models (LXMERT's 36)
SEED = 0  # token ids are drawn from a fixed generator: runs are reproducible


# --------------------------------------------------------------------------
# The plan: tensor specs, made into tensors when traced.
# --------------------------------------------------------------------------


# mm_token_type_ids: which modality each token is (transformers' convention).
MODALITY_CODES = {"text": 0, "image": 1, "video": 2, "audio": 3}


@dataclass
class TokenRun:
    """``count`` copies of ``token_id`` at the start of each row of a token tensor.

    ``count`` None: not known yet; :meth:`InputPlan.resolve` asks the model
    how many ``modality`` features one sample makes.
    """

    token_id: int
    count: int | None
    modality: str = "image"


@dataclass
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    high: int | None = None  # token ids are drawn from [0, high)
    avoid: tuple[int, ...] = ()  # ids never drawn (special tokens)
    data: list | None = None  # an exact value (grids, sizes): small index tensors
    fill: float | None = None  # a constant value (masks)
    runs: list[TokenRun] = field(default_factory=list)
    text: bool = False  # dim 1 is the text length (resized with the text)
    run_codes: bool = False  # zeros, with each run written as its modality code (mm_token_type_ids)
    modality: str | None = None  # "image", "video", "audio": dropped with its tokens if the model cannot use it

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def real(self, gen: torch.Generator) -> torch.Tensor:
        """The tensor, with real values (call outside any fake mode)."""
        if self.data is not None:
            return torch.tensor(self.data, dtype=self.dtype).reshape(self.shape)
        if self.run_codes:
            return self._write_runs(torch.zeros(self.shape, dtype=self.dtype))
        if self.fill is not None:
            return torch.full(self.shape, self.fill, dtype=self.dtype)
        if self.dtype.is_floating_point:
            return torch.randn(self.shape, dtype=self.dtype, generator=gen)
        if self.dtype == torch.bool:
            return torch.ones(self.shape, dtype=torch.bool)
        if self.high is None:
            return torch.ones(self.shape, dtype=self.dtype)
        t = torch.randint(0, max(self.high, 1), self.shape, dtype=self.dtype, generator=gen)
        if self.avoid:
            t = _replace_ids(t, self.avoid, self.high)
        return self._write_runs(t)

    def fake(self) -> torch.Tensor:
        """The tensor under the active fake mode (no values, no memory)."""
        if self.data is not None:
            return torch.tensor(self.data, dtype=self.dtype).reshape(self.shape)
        if self.run_codes:
            return self._write_runs(torch.zeros(self.shape, dtype=self.dtype))
        if self.fill is not None:
            return torch.full(self.shape, self.fill, dtype=self.dtype)
        if self.dtype.is_floating_point:
            return torch.randn(self.shape, dtype=self.dtype)
        if self.high is not None:
            return self._write_runs(torch.randint(0, max(self.high, 1), self.shape, dtype=self.dtype))
        return torch.ones(self.shape, dtype=self.dtype)

    def _write_runs(self, t: torch.Tensor) -> torch.Tensor:
        start = 0
        for r in self.runs:
            if r.count:
                t[..., start : start + r.count] = MODALITY_CODES[r.modality] if self.run_codes else r.token_id
                start += r.count
        return t


def _replace_ids(t: torch.Tensor, avoid: tuple[int, ...], high: int) -> torch.Tensor:
    """Replace special ids by the smallest id that is not special."""
    bad = set(avoid)
    safe = next((i for i in range(min(high, 1 << 20)) if i not in bad), 0)
    for a in bad:
        t[t == a] = safe
    return t


@dataclass
class Alternative:
    """Another layout for some inputs, tried when the first choice fails (audio features: bins or frames first)."""

    tensors: list[TensorSpec]
    how: str


@dataclass
class InputPlan:
    tensors: list[TensorSpec]
    main: str
    batch: int
    seq_len: int | None = None
    image_size: tuple[int, int] | None = None
    how: list[str] = field(default_factory=list)
    resolved: bool = False
    alternatives: list[Alternative] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)  # non-tensor forward arguments (use_cache=False)

    def use(self, alt: Alternative) -> None:
        """Switch to an alternative layout (replaces the tensors of the same names)."""
        by_name = {t.name: t for t in alt.tensors}
        self.tensors = [by_name.pop(t.name, t) for t in self.tensors] + list(by_name.values())
        self.how.append(alt.how)
        self.alternatives = []

    @property
    def settled(self) -> bool:
        """Whether the trace can no longer change this plan: no token counts to ask the
        model for, no alternative layout to fall back on."""
        return not self.alternatives and all(r.count is not None for t in self.tensors for r in t.runs)

    @property
    def main_shape(self) -> tuple[int, ...]:
        return next(t.shape for t in self.tensors if t.name == self.main)

    def make(self, values=None) -> dict[str, Any]:
        """Materialise the inputs (and the non-tensor ``kwargs``), ready for ``model(**inputs)``.

        Call under FakeTensorMode.  With ``values`` (a
        :class:`neurarch.trace.fake.ValueMode`), small inputs are created real
        and registered, so code that reads their values (token counts, grids)
        runs; large ones stay fake.  Without it every input is fake.
        """
        out = {}
        gen = torch.Generator().manual_seed(SEED)
        for t in self.tensors:
            if values is not None and t.numel <= values.limit:
                from torch.utils._python_dispatch import _disable_current_modes

                with _disable_current_modes():
                    r = t.real(gen)
                out[t.name] = values.real(r)
            else:
                out[t.name] = t.fake()
        out.update(self.kwargs)
        return out

    def resolve(self, model: nn.Module, values=None) -> None:
        """Count the image (video, audio) tokens the text must hold, by asking the model.

        Call under FakeTensorMode with the model already on fake tensors,
        before hooks are attached.  Fills every :class:`TokenRun` whose count
        is unknown and lengthens the text when the runs do not fit.
        """
        if self.resolved:
            return
        self.resolved = True
        pending = list({id(r): r for t in self.tensors for r in t.runs if r.count is None}.values())
        if not pending:
            return
        inputs = self.make(values)
        for r in pending:
            n, why = _count_features(model, r.modality, inputs, self.batch)
            if n:
                r.count = n
                self.how.append(f"{n} {r.modality} tokens per sample (id {r.token_id}), as many as the model's {r.modality} features")
            else:
                self._drop(r.modality, why)
        need = max((sum(r.count or 0 for r in t.runs) for t in self.tensors), default=0) + 1
        if self.seq_len is not None and need > self.seq_len:
            for t in self.tensors:
                if t.text and len(t.shape) >= 2:
                    t.shape = (t.shape[0], need, *t.shape[2:])
            self.how.append(f"text lengthened from {self.seq_len} to {need} tokens to hold them")
            self.seq_len = need


    def _drop(self, modality: str, why: str) -> None:
        """Trace without ``modality``: remove its inputs and its tokens from the text."""
        self.tensors = [t for t in self.tensors if t.modality != modality]
        for t in self.tensors:
            t.runs[:] = [r for r in t.runs if r.modality != modality]
        self.how.append(f"traced without the {modality}: {why}")


@dataclass
class InputOptions:
    batch: int = 1
    seq_len: int | None = None
    image_size: int | None = None
    input_shape: tuple[int, ...] | None = None
    # Encoder-decoders: the decoder's tokens (the labels' length); None = as many as the encoder's.
    decoder_seq_len: int | None = None

    def validate(self) -> None:
        limits.check_option("batch", self.batch, limits.MAX_BATCH)
        limits.check_option("seq_len", self.seq_len, limits.MAX_SEQ_LEN)
        limits.check_option("decoder_seq_len", self.decoder_seq_len, limits.MAX_SEQ_LEN)
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


# --------------------------------------------------------------------------
# Config reading.
# --------------------------------------------------------------------------

_SUBCONFIGS = ("text_config", "vision_config", "audio_config", "encoder_config", "decoder_config", "encoder", "decoder", "backbone_config")


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


def _find(cfg: Any, *names: str, subs: tuple[str, ...] = _SUBCONFIGS, default=None):
    """The first of ``names`` set on the config, else on its sub-configs (``subs`` first, then any other)."""
    v = _get(cfg, *names)
    if v is not None:
        return v
    for s in subs:
        sc = _sub(cfg, s)
        if sc is not None:
            v = _get(sc, *names)
            if v is not None:
                return v
    for sc in vars(cfg).values():  # then any other sub-config (asr_config, speech_config, ...)
        if hasattr(sc, "to_dict") and sc is not cfg:
            v = _get(sc, *names)
            if v is not None:
                return v
    return default


def _int(v, default: int | None = None) -> int | None:
    if isinstance(v, (list, tuple)) and v:
        v = v[0]
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _hw(v) -> tuple[int, int]:
    if isinstance(v, dict):
        v = (v.get("height") or v.get("shortest_edge"), v.get("width") or v.get("shortest_edge"))
    if isinstance(v, (list, tuple)):
        return (int(v[0]), int(v[-1])) if len(v) >= 2 else (int(v[0]), int(v[0]))
    return int(v), int(v)


def _max_positions(cfg: Any) -> int | None:
    v = _get(cfg, "max_position_embeddings", "n_positions", "max_positions", "n_ctx", "max_seq_len", "seq_length", "max_sequence_length")
    try:
        v = int(v)
    except (TypeError, ValueError):
        return None
    # Some configs use a sentinel (1e30 ...) for "no limit".
    if not 0 < v < limits.MAX_SEQ_LEN:
        return None
    # Models that also predict the next n tokens (ProphetNet's ngram streams) use positions past the text.
    ngram = _int(_get(cfg, "ngram"), 0) or 0
    return v - ngram if 0 < ngram < v else v


def special_ids(cfg: Any) -> tuple[int, ...]:
    """Every token id the config (and its sub-configs) names: pad, bos, eos, image, ..."""
    found: set[int] = set()

    def walk(c: Any, depth: int) -> None:
        if depth > 3 or c is None:
            return
        d = c.to_dict() if hasattr(c, "to_dict") else c
        if not isinstance(d, dict):
            return
        for k, v in d.items():
            if not isinstance(k, str):
                continue
            if isinstance(v, dict):
                walk(v, depth + 1)
            elif k.endswith(("_token_id", "_token_index", "_token_ids", "_id", "_index")) and "layer" not in k:
                vals = v if isinstance(v, (list, tuple)) else [v]
                found.update(x for x in vals if isinstance(x, int) and not isinstance(x, bool) and x >= 0)

    walk(cfg, 0)
    return tuple(sorted(found))


# --------------------------------------------------------------------------
# The model's forward.
# --------------------------------------------------------------------------


def _forward_params(model: nn.Module) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return {}


def _required(params: dict[str, inspect.Parameter]) -> list[str]:
    return [
        n
        for n, p in params.items()
        if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and n != "self"
    ]


def _is_decoder(model: nn.Module, cfg: Any) -> bool:
    name = type(model).__name__
    return bool(
        getattr(cfg, "is_decoder", False)
        or name.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration"))
        or getattr(cfg, "is_encoder_decoder", False)
        or "decoder" in (getattr(cfg, "model_type", "") or "")
        or _sub(cfg, "text_config") is not None
        or (hasattr(model, "get_decoder") and not getattr(cfg, "is_encoder_decoder", False) and "cache" in _forward_params(model))
    )


def _first_module(model: nn.Module, kinds: tuple[type, ...], match=None) -> nn.Module | None:
    for m in model.modules():
        if isinstance(m, kinds) and (match is None or match(m)):
            return m
    return None


# --------------------------------------------------------------------------
# One synthesiser per kind of input.
# --------------------------------------------------------------------------


@dataclass
class _Ctx:
    model: nn.Module
    cfg: Any
    opts: InputOptions
    params: dict[str, inspect.Parameter]
    b: int
    how: list[str]
    seq: int | None = None
    image: tuple[int, int] | None = None
    alternatives: list = field(default_factory=list)
    specs: dict[str, TensorSpec] = field(default_factory=dict)  # the plan so far, by forward argument

    def add(self, specs: list[TensorSpec]) -> None:
        for t in specs:
            self.specs.setdefault(t.name, t)

    @property
    def text_cfg(self):
        return _sub(self.cfg, "text_config", "decoder_config") or self.cfg

    @property
    def vision_cfg(self):
        return _sub(self.cfg, "vision_config", "backbone_config", "encoder") or self.cfg


def _text_seq(ctx: _Ctx, text_cfg: Any = None, decoder: bool | None = None) -> int:
    if ctx.seq is not None and text_cfg is None:
        return ctx.seq
    c = text_cfg if text_cfg is not None else ctx.text_cfg
    cap = _max_positions(c) or _max_positions(ctx.cfg)
    if ctx.opts.seq_len is not None:
        if cap is not None and ctx.opts.seq_len > cap:
            ctx.how.append(f"--seq-len {ctx.opts.seq_len} exceeds the model's {cap} positions")
        else:
            ctx.how.append(f"seq_len {ctx.opts.seq_len} from --seq-len")
        seq = ctx.opts.seq_len
    else:
        dec = _is_decoder(ctx.model, ctx.cfg) if decoder is None else decoder
        default = DEFAULT_SEQ_LEN_DECODER if dec else DEFAULT_SEQ_LEN_ENCODER
        step = stepwise_recurrent(c) or stepwise_recurrent(ctx.cfg)
        axial = _get(c, "axial_pos_shape") if _get(c, "axial_pos_embds") else None
        if isinstance(axial, (list, tuple)) and axial and all(isinstance(x, int) and x > 0 for x in axial):
            # Axial position embeddings (Reformer) must be filled exactly by a training sequence.
            seq = math.prod(axial)
            ctx.how.append(f"seq_len {seq}: the product of the config's axial_pos_shape {list(axial)} (a training sequence fills it)")
        elif step:
            ctx.how.append(f"seq_len {DEFAULT_SEQ_LEN_STEPWISE}: neurarch's default for {step} (--seq-len overrides)")
            seq = DEFAULT_SEQ_LEN_STEPWISE
        elif cap is not None and cap < default:
            ctx.how.append(f"seq_len {cap}: the model's max positions (default {default} capped)")
            seq = cap
        else:
            ctx.how.append(f"seq_len {default}: neurarch's default for {'decoders' if dec else 'encoders'}")
            seq = default
    if text_cfg is None:
        ctx.seq = seq
    return seq


_SCAN_STATE = ("state_size", "mamba_d_state", "ssm_state_size")
_SCAN_CHUNK = ("chunk_size", "mamba_chunk_size")


def stepwise_recurrent(cfg: Any) -> str | None:
    """Why a model's reference PyTorch code runs one step per token, or None.

    Told from the config alone: a selective-scan state (``state_size``,
    ``mamba_d_state``, ``ssm_state_size``) with no chunk size (Mamba-2-style
    models scan in chunks of ``chunk_size`` and are not stepwise), or an RWKV
    time mix (``attention_hidden_size`` with no attention heads).
    """
    if cfg is None:
        return None
    if _get(cfg, *_SCAN_STATE) is not None and _get(cfg, *_SCAN_CHUNK) is None:
        return "a selective scan stepped token by token (a scan state size, no chunk size)"
    if _get(cfg, "attention_hidden_size") is not None and _get(cfg, "num_attention_heads", "num_heads", "n_head") is None:
        return "a time-mixing recurrence stepped token by token (attention_hidden_size, no attention heads)"
    return None


def _vocab(cfg: Any) -> int:
    return _int(_get(cfg, "vocab_size", "n_vocab", "num_tokens"), 1000) or 1000


def _tokens(ctx: _Ctx, name: str, seq: int | None = None, cfg: Any = None) -> TensorSpec:
    c = cfg or ctx.text_cfg
    seq = seq or _text_seq(ctx)
    return TensorSpec(name, (ctx.b, seq), torch.long, _vocab(c), avoid=special_ids(ctx.cfg), text=True)


def _channels(vc: Any) -> int:
    return _int(_get(vc, "num_channels", "in_channels", "in_chans", "input_channels", "channels"), 3) or 3


def _image_size(ctx: _Ctx) -> tuple[int, int]:
    """Image height and width: --image-size, else the config's, else the default; never smaller
    than one patch at every scale the model looks at the image (DepthPro: 384 px patches at 1/4 scale)."""
    if ctx.image is not None:
        return ctx.image
    vc = ctx.vision_cfg
    if ctx.opts.image_size is not None:
        ctx.how.append(f"image {ctx.opts.image_size}x{ctx.opts.image_size} from --image-size")
        ctx.image = (ctx.opts.image_size, ctx.opts.image_size)
        return ctx.image
    size = _get(vc, "image_size", "img_size", "input_size", "crop_size")
    if size is None:
        size = _find(ctx.cfg, "image_size", "img_size", "input_size", "max_img_size")
    try:
        hw = _hw(size) if size is not None else None
    except (TypeError, ValueError):
        hw = None
    if hw is None or min(hw) <= 0:
        hw, why = (DEFAULT_IMAGE_SIZE, DEFAULT_IMAGE_SIZE), "neurarch's default (the config gives no image_size)"
    else:
        why = "from the config"
    p = _int(_get(vc, "patch_size") or _get(ctx.cfg, "patch_size"))
    # Windowed backbones cut the patch grid into num_windows x num_windows windows (RF-DETR).
    windows = _int(_find(ctx.cfg, "num_windows", subs=(*_SUBCONFIGS, "backbone_config")))
    if p and windows and windows > 1 and (hw[0] % (p * windows) or hw[1] % (p * windows)):
        unit = p * windows
        hw = (-(-hw[0] // unit) * unit, -(-hw[1] // unit) * unit)
        why = f"rounded up to whole windows ({windows} windows of {p} px patches a side)"
    if p and p > 1:
        ratios = _find(ctx.cfg, "scaled_images_ratios")
        low = min(ratios) if isinstance(ratios, (list, tuple)) and ratios and min(ratios) > 0 else 1
        side = int(math.ceil(p / low))
        if min(hw) < side:
            hw, why = (max(hw[0], side), max(hw[1], side)), f"at least one {p} px patch at scale {low:g}"
    ctx.how.append(f"image {hw[0]}x{hw[1]} {why}" if why.startswith("from") else f"image {hw[0]}x{hw[1]}: {why}")
    ctx.image = hw
    return hw


def _num_frames(ctx: _Ctx) -> int:
    n = _int(_find(ctx.cfg, "num_frames", "frames_per_clip", "video_frames"))
    if n:
        ctx.how.append(f"{n} video frames from the config")
        return n
    ctx.how.append(f"{DEFAULT_VIDEO_FRAMES} video frames: neurarch's default")
    return DEFAULT_VIDEO_FRAMES


def _patch_grid(ctx: _Ctx) -> dict | None:
    """Qwen-style flattened patches: ``(patches, C*T*p*p)`` plus a ``[t, h, w]`` grid per image."""
    vc = ctx.vision_cfg
    p = _int(_get(vc, "patch_size", "spatial_patch_size"))
    if not p:
        return None
    t = _int(_get(vc, "temporal_patch_size", "patch_temporal"), 1) or 1
    merge = _int(_get(vc, "spatial_merge_size", "merge_size", "downsample_ratio"), 1) or 1
    c = _channels(vc)
    h, w = _image_size(ctx)
    unit = p * merge
    gh, gw = max(1, round(h / unit)) * merge, max(1, round(w / unit)) * merge
    return {"patch": p, "temporal": t, "merge": merge, "channels": c, "grid": [1, gh, gw], "dim": c * t * p * p}


def _pixels(ctx: _Ctx, name: str) -> list[TensorSpec]:
    """Images (or video) for ``name``: 4-D, 5-D video, or Qwen-style patches with a grid."""
    grid_names = [n for n in ("image_grid_thw", "grid_thw", "image_grid_hw") if n in ctx.params]
    if name == "pixel_values" and grid_names:
        g = _patch_grid(ctx)
        if g:
            t, gh, gw = g["grid"]
            n = t * gh * gw
            grid_name = grid_names[0]
            grid = [[t, gh, gw]] * ctx.b if grid_name != "image_grid_hw" else [[gh, gw]] * ctx.b
            ctx.how.append(f"{ctx.b} image(s) as {n} patches of {g['dim']} values, grid {gh}x{gw}")
            p, c, tp = g["patch"], g["channels"], g["temporal"]
            cube = (ctx.b * n, c, p, p) if tp == 1 else (ctx.b * n, c, tp, p, p)
            ctx.alternatives.append(Alternative([TensorSpec(name, cube)], f"patches as {'images' if tp == 1 else 'cubes'} {list(cube[1:])} (flat patches failed)"))
            m = g["merge"]
            if m > 1 and tp == 1 and grid_name != "image_grid_hw":
                # One pixel block per merged (language-model) token, channels last, the grid counted
                # in merged tokens (Inkling-2's tower).
                tokens = [[t, gh // m, gw // m]] * ctx.b
                blocks = TensorSpec(name, (ctx.b * n // (m * m), p * m, p * m, c))
                ctx.alternatives.append(
                    Alternative([blocks, TensorSpec(grid_name, (ctx.b, 3), torch.long, data=tokens)], f"one {p * m}x{p * m}x{c} pixel block per merged token, grid {gh // m}x{gw // m} in tokens (flat patches failed)")
                )
            return [TensorSpec(name, (ctx.b * n, g["dim"])), TensorSpec(grid_name, (ctx.b, len(grid[0])), torch.long, data=grid)]
    if name == "pixel_values" and ({"spatial_shapes", "pixel_position_ids"} & set(ctx.params)):
        return _patch_list(ctx, name)
    vc = ctx.vision_cfg
    c = _channels(vc)
    h, w = _image_size(ctx)
    video = name.endswith("videos") or (name == "pixel_values" and _video_model(ctx))
    if video:
        f = _num_frames(ctx)
        ctx.alternatives.append(Alternative([TensorSpec(name, (ctx.b, c, h, w))], "one image instead of a video (the video failed)"))
        return [TensorSpec(name, (ctx.b, f, c, h, w))]
    ctx.how.append(f"{c} channels")
    ctx.alternatives.append(Alternative([TensorSpec(name, (ctx.b, 2, c, h, w))], "a pair of images, (batch, 2, C, H, W) (one image failed)"))
    return [TensorSpec(name, (ctx.b, c, h, w))]


def _patch_list(ctx: _Ctx, name: str) -> list[TensorSpec]:
    """Images already cut into a list of patches, with their grid positions (NaFlex-style):
    ``(batch, patches, C*p*p)`` plus ``spatial_shapes`` ``[h, w]`` or per-patch ``[x, y]`` positions."""
    vc = ctx.vision_cfg
    p = _int(_get(vc, "patch_size"), 16) or 16
    c = _channels(vc)
    n = _int(_get(vc, "num_patches", "max_num_patches"))
    if n:
        gh = gw = max(int(math.isqrt(n)), 1)
    else:
        h, w = _image_size(ctx)
        gh, gw = max(h // p, 1), max(w // p, 1)
    # Grid sides a multiple of the pooling/merge window, when the tower pools patches.
    unit = _int(_get(vc, "pooling_kernel_size", "spatial_merge_size", "merge_size"), 1) or 1
    gh, gw = -(-gh // unit) * unit, -(-gw // unit) * unit
    n = gh * gw
    ctx.how.append(f"{ctx.b} image(s) as {n} patches ({gh}x{gw}) of {c}x{p}x{p} values")
    specs = [TensorSpec(name, (ctx.b, n, c * p * p))]
    if "spatial_shapes" in ctx.params:
        specs.append(TensorSpec("spatial_shapes", (ctx.b, 2), torch.long, data=[[gh, gw]] * ctx.b))
    if "pixel_position_ids" in ctx.params:
        pos = [[x, y] for y in range(gh) for x in range(gw)]
        specs.append(TensorSpec("pixel_position_ids", (ctx.b, n, 2), torch.long, data=[pos] * ctx.b))
    for mask in ("pixel_attention_mask", "padding_positions"):
        if mask in ctx.params:
            specs.append(TensorSpec(mask, (ctx.b, n), torch.bool if mask == "padding_positions" else torch.long, fill=0 if mask == "padding_positions" else 1))
    return specs


def _video_model(ctx: _Ctx) -> bool:
    """A video model: its config names frames or tubelets, or its first conv is 3-D."""
    if _find(ctx.cfg, "num_frames", "frames_per_clip", "tubelet_size") is not None:
        return True
    return _first_module(ctx.model, (nn.Conv3d,)) is not None


def _audio_feature_size(cfg: Any) -> int | None:
    f = _find(cfg, "feature_projection_input_dim", "input_feat_size", "num_mel_bins", "n_mels", "feature_size", "mel_bins", "num_mels", "input_feat_per_channel", "input_dim", subs=("audio_config", "encoder_config", "encoder"))
    f = _int(f)
    ch = _int(_find(cfg, "input_channels", subs=("audio_config",)), 1) or 1
    if f and _get(cfg, "input_feat_per_channel") is not None:
        f *= ch
    # Frames stacked into one feature vector (low-frame-rate front ends).
    stack = _int(_find(cfg, "num_stacked_frames", "stack_frames", "lfr_m", subs=("audio_config", "encoder_config")), 1) or 1
    return f * stack if f else f


def _audio_features(ctx: _Ctx, name: str) -> list[TensorSpec]:
    f = _audio_feature_size(ctx.cfg) or 80
    src = _int(_find(ctx.cfg, "max_source_positions", subs=("audio_config", "encoder_config", "encoder")))
    conv = _first_module(ctx.model, (nn.Conv1d, nn.Linear, nn.Conv2d), lambda m: getattr(m, "in_channels", getattr(m, "in_features", None)) == f)
    channels_first = isinstance(conv, nn.Conv1d)
    raw = next((t for t in ctx.specs.values() if t.name in _AUDIO_VALUES), None)
    stride = audio_stride(ctx.cfg)
    if raw is not None and stride:  # features of the same audio as the raw samples beside them (XCodec2)
        frames, why = max(raw.shape[-1] // stride, 1), f"one per {stride} samples of the raw audio"
    elif ctx.opts.seq_len:
        frames, why = ctx.opts.seq_len, "--seq-len"
    elif src and channels_first:
        frames, why = 2 * src, "2 x max_source_positions"
    else:
        frames, why = DEFAULT_AUDIO_FRAMES, "neurarch's default"
    ctx.seq = frames
    shape = (ctx.b, f, frames) if channels_first else (ctx.b, frames, f)
    ctx.how.append(f"audio features {f} bins x {frames} frames ({why}), " + ("bins first" if channels_first else "frames first"))
    # The layout is a guess from the first layer that takes f channels (some models transpose
    # inside): the other one is kept as an alternative.
    other = (ctx.b, frames, f) if channels_first else (ctx.b, f, frames)
    ctx.alternatives.append(Alternative([TensorSpec(name, other)], f"audio features laid out {'frames' if channels_first else 'bins'} first (the other layout failed)"))
    ctx.alternatives.append(Alternative([TensorSpec(name, (ctx.b, 1, frames, f))], "audio features as a one-channel image (the 3-D layouts failed)"))
    # The front end may stack frames (or add deltas) before its first layer: that layer's width,
    # when it is a small multiple of the bins and no layer takes the bins themselves.
    first = _first_module(ctx.model, (nn.Linear, nn.Conv1d))
    width = getattr(first, "in_features", getattr(first, "in_channels", None)) if first is not None else None
    if conv is None and width and width != f and width % f == 0 and width // f <= 8:
        lay = (ctx.b, width, frames) if isinstance(first, nn.Conv1d) else (ctx.b, frames, width)
        ctx.alternatives.append(Alternative([TensorSpec(name, lay)], f"audio features {width} wide, the width the first input layer takes ({width // f} x {f} bins)"))
    if _audio_feature_size(ctx.cfg) is None:  # the config names no bin count: the other common one
        ctx.alternatives.append(Alternative([TensorSpec(name, (ctx.b, frames, 128))], "audio features of 128 mel bins (80 failed; the config names no bin count)"))
    specs = [TensorSpec(name, shape)]
    # Its frame mask, when the forward takes one (some models need it though it is optional).
    for mask in ctx.params:
        if mask.endswith("mask") and (mask.startswith(name) or mask in ("feature_attention_mask", "audio_mel_mask", "audio_attention_mask")):
            specs.append(_mask(ctx, mask, (ctx.b, frames)))
    return specs


def _mask(ctx: _Ctx, name: str, shape: tuple[int, ...]) -> TensorSpec:
    """A mask that keeps everything: ones, or all-False when the forward annotates a BoolTensor
    (those mark padding: Gemma-3n's ``audio_mel_mask``)."""
    p = ctx.params.get(name)
    ann = str(p.annotation) if p is not None else ""
    if "BoolTensor" in ann or "torch.bool" in ann:
        return TensorSpec(name, shape, torch.bool, fill=0)
    return TensorSpec(name, shape, torch.long, fill=1)


def _audio_values(ctx: _Ctx, name: str) -> list[TensorSpec]:
    f = _int(_find(ctx.cfg, "num_mel_bins"))
    length = _int(_get(ctx.cfg, "max_length"))
    if f and length:  # a spectrogram model that calls its input input_values (AST)
        ctx.how.append(f"spectrogram {length} frames x {f} mel bins from the config")
        ctx.seq = length
        return [TensorSpec(name, (ctx.b, length, f))]
    samples = ctx.opts.seq_len or DEFAULT_AUDIO_SAMPLES
    ctx.how.append(f"audio {samples} samples" + (" from --seq-len" if ctx.opts.seq_len else " (one second at 16 kHz, neurarch's default)"))
    samples = _whole_strides(ctx, samples)
    ctx.seq = samples
    # A model built without its speech pre-net takes hidden states under the same name (SpeechT5Model):
    # vectors of the config's width, for the decoder too when it takes decoder_input_values.
    width = _int(_get(ctx.cfg, "hidden_size"))
    if width and name == "input_values" and "decoder_input_values" in ctx.params:
        n = min(DEFAULT_SEQ_LEN_ENCODER, _max_positions(ctx.cfg) or DEFAULT_SEQ_LEN_ENCODER)
        vecs = [TensorSpec(name, (ctx.b, n, width)), TensorSpec("decoder_input_values", (ctx.b, n, width))]
        ctx.alternatives.append(Alternative(vecs, f"input_values and decoder_input_values as {n} vectors of the config's width {width} (a model without its speech pre-net)"))
    ch = _int(_get(ctx.cfg, "audio_channels", "num_channels", "channels"))
    if ch:
        ctx.alternatives.append(Alternative([TensorSpec(name, (ctx.b, samples))], "audio as (batch, samples) (the channel layout failed)"))
        return [TensorSpec(name, (ctx.b, ch, samples))]
    ctx.alternatives.append(Alternative([TensorSpec(name, (ctx.b, 1, samples))], "audio as (batch, 1 channel, samples) (the flat layout failed)"))
    return [TensorSpec(name, (ctx.b, samples))]


def audio_stride(cfg: Any) -> int | None:
    """Samples per output frame of a strided raw-audio encoder: the product of the config's
    per-stage ``downsampling_ratios`` (or ``patch_sizes``, Muse-Spark's stages), when it names them."""
    for name in ("downsampling_ratios", "patch_sizes"):
        v = _get(cfg, name)
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, int) and x > 0 for x in v):
            return math.prod(v)
    return None


def _whole_strides(ctx: _Ctx, samples: int) -> int:
    """``samples`` rounded up to whole strides of the encoder (some refuse a partial frame)."""
    stride = audio_stride(ctx.cfg)
    if stride and stride > 1 and samples % stride:
        rounded = -(-samples // stride) * stride
        ctx.how.append(f"audio lengthened to {rounded} samples: whole strides of {stride} (the product of the config's per-stage strides)")
        return rounded
    return samples


def _time_series(ctx: _Ctx) -> list[TensorSpec]:
    cfg = ctx.cfg
    ctxlen = _int(_get(cfg, "context_length", "context_len", "sequence_length", "seq_len"), None)
    lags = _get(cfg, "lags_sequence")
    if not ctxlen:
        ctxlen = DEFAULT_TIME_STEPS
        ctx.how.append(f"{ctxlen} time steps: neurarch's default")
    else:
        ctx.how.append(f"{ctxlen} time steps of context from the config")
    steps = ctxlen + (max(lags) if lags else 0)
    channels = _int(_get(cfg, "num_input_channels", "input_size", "num_channels"), 1) or 1
    ctx.seq = steps
    past = (ctx.b, steps) if lags is not None and channels == 1 else (ctx.b, steps, channels)
    if lags is None and _get(cfg, "num_input_channels") is None and channels == 1:
        past = (ctx.b, steps)
    specs = [TensorSpec("past_values", past)]
    n_time = _int(_get(cfg, "num_time_features"), 0) or 0
    pred = _int(_get(cfg, "prediction_length", "horizon_length"), None)
    for name in ctx.params:
        if name == "past_time_features":
            specs.append(TensorSpec(name, (ctx.b, steps, max(n_time, 1))))
        elif name == "past_observed_mask":
            specs.append(TensorSpec(name, past, fill=1.0))
        elif name == "future_time_features" and pred:
            specs.append(TensorSpec(name, (ctx.b, pred, max(n_time, 1))))
        elif name == "static_categorical_features" and (_int(_get(cfg, "num_static_categorical_features"), 0) or 0) > 0:
            specs.append(TensorSpec(name, (ctx.b, cfg.num_static_categorical_features), torch.long, high=min(cfg.cardinality or [1])))
        elif name == "static_real_features" and (_int(_get(cfg, "num_static_real_features"), 0) or 0) > 0:
            specs.append(TensorSpec(name, (ctx.b, cfg.num_static_real_features)))
        elif name == "past_values_padding":
            specs.append(TensorSpec(name, (ctx.b, steps), fill=0.0))
        elif name == "freq":
            specs.append(TensorSpec(name, (ctx.b, 1), torch.long, fill=0))
    return specs


def _bbox(ctx: _Ctx, seq: int) -> TensorSpec:
    # One valid box [x0, y0, x1, y1] on the 0-1000 grid for every token (a quad of 4 points
    # when the config's dim_bbox says 8).
    n = _int(_get(ctx.cfg, "dim_bbox"), 4) or 4
    box = [0, 0, 1000, 1000] * (n // 4)
    return TensorSpec("bbox", (ctx.b, seq, n), torch.long, data=[[box] * seq] * ctx.b, text=True)


# --------------------------------------------------------------------------
# The planner.
# --------------------------------------------------------------------------

_PIXELS = ("pixel_values", "pixel_values_videos", "image", "images", "flattened_patches")
_AUDIO_FEATURES = ("input_features", "audio_features", "audio_mel", "input_audio_features")
_AUDIO_VALUES = ("input_values", "audio_values", "waveform")


def _main_name(model: nn.Module, params: dict[str, inspect.Parameter]) -> str:
    """The forward argument the model is fed by: ``main_input_name`` when the forward takes it."""
    main = getattr(model, "main_input_name", "input_ids")
    if isinstance(main, (list, tuple)):
        main = main[0] if main else "input_ids"
    if main in params:
        return main
    required = _required(params)
    for cand in [*required, "input_ids", "pixel_values", "input_values", "input_features", "past_values"]:
        if cand in params:
            return cand
    return next(iter(params), "x")


def _token_runs(ctx: _Ctx, modality: str) -> list[TokenRun]:
    names = {"image": ("image_token_id", "image_token_index"), "video": ("video_token_id", "video_token_index"), "audio": ("audio_token_id", "audio_token_index")}[modality]
    tid = _int(_find(ctx.cfg, *names, subs=("text_config",)))
    return [TokenRun(tid, None, modality)] if tid is not None else []


def plan_inputs(model: nn.Module, cfg: Any, opts: InputOptions, default_shape: tuple[int, ...] | None = None) -> InputPlan:
    """Decide the forward inputs for a model (see the module docstring for the rules)."""
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

    ctx = _Ctx(model, cfg, opts, params, b, how)
    main = _add_main(ctx, _main_name(model, params))
    _add_text(ctx, main)
    if main == "input_ids":
        _add_media(ctx)
    _add_extras(ctx)
    _add_decoder(ctx, main)
    if not ctx.specs:
        _add_embedded(ctx)
    for name in _required(params):  # whatever else the forward requires, by name
        if name not in ctx.specs:
            ctx.add(_by_name(ctx, name, ctx.specs))

    # A training step keeps no key/value cache (and some hybrid models cannot build one by default).
    kwargs = {"use_cache": False} if "use_cache" in params else {}
    if kwargs:
        how.append("use_cache=False (a training step keeps no cache)")

    tensors = list(ctx.specs.values())
    for t in tensors:
        if t.numel > limits.MAX_INPUT_ELEMENTS:
            raise InputError(f"input {t.name} {t.shape} is beyond neurarch's limit of {limits.MAX_INPUT_ELEMENTS:,} elements")
    if main not in ctx.specs and tensors:
        main = tensors[0].name
    seq = ctx.seq if main not in _PIXELS else None
    return InputPlan(tensors, main=main, batch=b, seq_len=seq, image_size=ctx.image, how=how, alternatives=ctx.alternatives, kwargs=kwargs)


def _add_main(ctx: _Ctx, main: str) -> str:
    """1. The main input; returns its name (``input_ids`` when the model is fed text)."""
    if main in _PIXELS:
        ctx.add(_pixels(ctx, main))
    elif main in _AUDIO_FEATURES:
        ctx.add(_audio_features(ctx, main))
    elif main in _AUDIO_VALUES:
        ctx.add(_audio_values(ctx, main))
    elif main == "past_values":
        ctx.add(_time_series(ctx))
    elif main == "hidden_states" and ({"grid_thw", "image_grid_thw"} & set(ctx.params)):
        ctx.add(_by_name(ctx, "hidden_states", ctx.specs))  # a Qwen-style vision tower fed patches
    if main not in ctx.specs and "input_ids" in ctx.params:
        main = "input_ids"
    return main


def _add_text(ctx: _Ctx, main: str) -> None:
    """2. Token ids, when the model is fed text or needs it beside its main input."""
    p, cfg = ctx.params, ctx.cfg
    if "input_ids" not in p or "input_ids" in ctx.specs:
        return
    if main == "input_ids" or "input_ids" in _required(p) or _sub(cfg, "text_config") is not None or _token_runs(ctx, "image"):
        ids = ctx.specs["input_ids"] = _tokens(ctx, "input_ids")
        # Audio-token models read a text stream and one stream per codebook at each step (Kyutai):
        # (batch, steps, 1 + codebooks), ids within the codebooks' vocabulary.
        k, cb_vocab = _int(_get(cfg, "num_codebooks")), _int(_get(cfg, "codebook_vocab_size"))
        if k and k > 1 and cb_vocab:
            streams = TensorSpec("input_ids", (*ids.shape, 1 + k), torch.long, min(cb_vocab, ids.high or cb_vocab), avoid=ids.avoid, text=True)
            ctx.alternatives.append(Alternative([streams], f"input_ids as a text stream and {k} codebook streams per step"))


def _add_media(ctx: _Ctx) -> None:
    """3. The image (audio, video) of a multimodal text model, and its placeholder tokens in the text."""
    p, cfg, specs = ctx.params, ctx.cfg, ctx.specs
    if "input_ids" not in specs:
        return
    ids = specs["input_ids"]
    if "pixel_values" in p and "pixel_values" not in specs:
        runs = _token_runs(ctx, "image")
        if runs or _sub(cfg, "vision_config", "backbone_config") is not None or "pixel_values" in _required(p) or _get(cfg, "image_size") is not None:
            ctx.add(_tagged(_pixels(ctx, "pixel_values"), "image"))
            ids.runs.extend(runs)
    if _sub(cfg, "audio_config", "speech_config") is not None:  # CLAP-like towers, audio-language models
        audio = next((n for n in (*_AUDIO_FEATURES, *_AUDIO_VALUES) if n in p), None)
        if audio is not None and audio not in specs:
            seq = ctx.seq
            ctx.add(_tagged(_audio_features(ctx, audio) if audio in _AUDIO_FEATURES else _audio_values(ctx, audio), "audio"))
            frames, ctx.seq = ctx.seq, seq  # the text keeps its own length
            ids.runs.extend(_token_runs(ctx, "audio"))
            # Streaming models add one audio embedding to each text token (Voxtral-Realtime:
            # audio_length_per_tok feature frames a token): the text as long as the audio.
            per_tok = _int(_get(cfg, "audio_length_per_tok"))
            if per_tok and frames and frames // per_tok >= 1:
                n = frames // per_tok
                ctx.alternatives.append(Alternative([TensorSpec("input_ids", (ctx.b, n), torch.long, ids.high, avoid=ids.avoid, text=True)], f"text of {n} tokens: one per {per_tok} audio frames (the config's audio_length_per_tok)"))
    if "pixel_values_videos" in _required(p) and "pixel_values_videos" not in specs:
        ctx.add(_tagged(_pixels(ctx, "pixel_values_videos"), "video"))
        ids.runs.extend(_token_runs(ctx, "video"))
    if ids.runs and "mm_token_type_ids" in p:  # which modality each token is
        specs["mm_token_type_ids"] = TensorSpec("mm_token_type_ids", ids.shape, torch.long, runs=ids.runs, text=True, run_codes=True)


def _add_extras(ctx: _Ctx) -> None:
    """Inputs some text models need beside their tokens: language ids, layout boxes."""
    p, cfg, specs, b = ctx.params, ctx.cfg, ctx.specs, ctx.b
    # Language adapters (X-MOD): the first of the config's languages.
    if "lang_ids" in p and _get(cfg, "languages"):
        specs["lang_ids"] = TensorSpec("lang_ids", (b,), torch.long, fill=0)
        ctx.how.append(f"language {list(cfg.languages)[0]!r} (lang_ids 0)")
    # Kosmos-2: which text positions the image's latent queries take.
    ids = specs.get("input_ids")
    if "image_embeds_position_mask" in p and ids is not None and "pixel_values" in specs:
        n = _int(_find(cfg, "latent_query_num", "image_seq_length", "num_image_tokens"))
        if n and n + 1 < ids.shape[1]:
            row = [0] + [1] * n + [0] * (ids.shape[1] - n - 1)
            specs["image_embeds_position_mask"] = TensorSpec("image_embeds_position_mask", ids.shape, torch.long, data=[row] * b)
            ctx.how.append(f"{n} image positions in the text (image_embeds_position_mask, the config's latent queries)")
    # NaViT-style towers: each image's patch grid [h, w] (MiniCPM-V's target_sizes).  A tower
    # alone only: the full model works the grid out itself (and would then want more inputs).
    pix = specs.get("pixel_values")
    patch = _int(_get(ctx.vision_cfg, "patch_size"))
    for name in ("target_sizes", "tgt_sizes"):
        if name in p and pix is not None and len(pix.shape) == 4 and patch and ids is None:
            grid = [pix.shape[2] // patch, pix.shape[3] // patch]
            specs[name] = TensorSpec(name, (b, 2), torch.long, data=[grid] * b)
            ctx.how.append(f"{name} {grid[0]}x{grid[1]} patches per image")
    # Several images per sample with a text-by-image mask (IDEFICS): one image, seen by every token.
    if "image_attention_mask" in p and ids is not None and pix is not None and len(pix.shape) == 4:
        specs["pixel_values"] = TensorSpec("pixel_values", (b, 1, *pix.shape[1:]), modality=pix.modality)
        specs["image_attention_mask"] = TensorSpec("image_attention_mask", (b, ids.shape[1], 1), torch.long, fill=1, text=True)
        ctx.how.append("1 image per sample, (batch, images, C, H, W), seen by every token (image_attention_mask)")
    # A cross-attending tower alone (BLIP-2's Q-Former): the states of the encoder it attends to,
    # of the config's encoder_hidden_size.
    enc = _int(_get(cfg, "encoder_hidden_size"))
    if "encoder_hidden_states" in p and "encoder_hidden_states" not in specs and enc:
        specs["encoder_hidden_states"] = TensorSpec("encoder_hidden_states", (b, DEFAULT_ENCODER_STATES, enc))
        ctx.how.append(f"encoder_hidden_states: {DEFAULT_ENCODER_STATES} states (neurarch's default: a 224 px image in 14 px patches + 1) of the config's encoder_hidden_size {enc}")
    # Region features of a text model (LXMERT: visual_feats with the config's visual_feat_dim, visual_pos).
    if ids is not None:
        for name in p:
            dim = _int(_get(cfg, f"{name}_dim", f"{name[:-1]}_dim" if name.endswith("s") else f"{name}_dim"))
            if name.startswith("visual_") and name not in specs and dim:
                specs[name] = TensorSpec(name, (b, DEFAULT_VISUAL_REGIONS, dim))
                ctx.how.append(f"{name}: {DEFAULT_VISUAL_REGIONS} regions (neurarch's default) of {dim} values (the config's width)")
    # Layout models: a box per token (they embed 2-D positions).
    if "bbox" in p and "input_ids" in specs and (
        "bbox" in _required(p) or _find(cfg, "max_2d_position_embeddings", "max_2d_positions", "dim_bbox") is not None
    ):
        box = _bbox(ctx, specs["input_ids"].shape[1])
        specs["bbox"] = box
        # Integer boxes on the 0-1000 grid (LayoutLM); some models take them as floats in [0, 1].
        unit = [0.0, 0.0, 1.0, 1.0] * (box.shape[-1] // 4)
        floats = TensorSpec("bbox", box.shape, data=[[unit] * box.shape[1]] * b, text=True)
        ctx.alternatives.append(Alternative([floats], "boxes as floats in [0, 1] (integer boxes failed)"))


def _add_embedded(ctx: _Ctx) -> None:
    """A model fed none of the known inputs, whose own ``embed_<x>`` layers name its inputs
    (Decision Transformer: ``embed_state`` takes ``states``): one stream per such forward
    argument, shaped for that layer (a Linear's width, an Embedding's ids), the streams sharing the
    model's positions (they are interleaved step by step)."""
    found: list[tuple[str, nn.Module]] = []
    for arg, param in ctx.params.items():
        if "Tensor" not in str(param.annotation):  # return_dict and other flags
            continue
        for child_name, child in ctx.model.named_children():
            stem = child_name[len("embed_"):] if child_name.startswith("embed_") else ""
            if len(stem) >= 3 and arg.startswith(stem) and isinstance(child, (nn.Linear, nn.Embedding)):
                found.append((arg, child))
                break
    if len(found) < 2:
        return
    cap = _max_positions(ctx.cfg) or DEFAULT_SEQ_LEN_ENCODER
    n = max(1, min(DEFAULT_SEQ_LEN_ENCODER, cap // len(found)))
    ctx.seq = n
    for arg, layer in found:
        if isinstance(layer, nn.Embedding):
            ctx.specs[arg] = TensorSpec(arg, (ctx.b, n), torch.long, layer.num_embeddings)
        else:
            ctx.specs[arg] = TensorSpec(arg, (ctx.b, n, layer.in_features))
    ctx.how.append(f"{len(found)} streams of {n} steps ({', '.join(a for a, _ in found)}), shaped for the model's embed_* layers, sharing its {cap} positions")


def _add_decoder(ctx: _Ctx, main: str) -> None:
    """4. Encoder-decoder: the decoder's tokens (capped by the decoder's positions)."""
    p, cfg, b = ctx.params, ctx.cfg, ctx.b
    if "decoder_input_ids" not in p or not (getattr(cfg, "is_encoder_decoder", False) or "decoder_input_ids" in _required(p)):
        return
    dec_cfg = _sub(cfg, "decoder", "decoder_config", "text_config") or cfg
    asked = ctx.opts.decoder_seq_len
    dec_seq = asked or (_text_seq(ctx, dec_cfg, decoder=True) if main != "input_ids" else (ctx.seq or _text_seq(ctx)))
    cap = _max_positions(dec_cfg) or _int(_get(cfg, "max_target_positions"))
    if cap is not None:
        dec_seq = min(dec_seq, cap)
    vocab, avoid = _vocab(dec_cfg), special_ids(cfg)
    ctx.specs["decoder_input_ids"] = TensorSpec("decoder_input_ids", (b, dec_seq), torch.long, vocab, avoid=avoid)
    ctx.how.append(f"decoder_input_ids of {dec_seq} tokens" + (" (--decoder-seq-len)" if asked else ""))
    codebooks = _int(_get(dec_cfg, "num_channels", "num_codebooks"))
    if codebooks and codebooks > 1:  # audio decoders: one token per codebook per step
        per_codebook = TensorSpec("decoder_input_ids", (b, dec_seq, codebooks), torch.long, vocab, avoid=avoid)
        ctx.alternatives.append(Alternative([per_codebook], f"decoder tokens for {codebooks} codebooks per step"))


def _tagged(specs: list[TensorSpec], modality: str) -> list[TensorSpec]:
    for t in specs:
        t.modality = modality
    return specs


def _by_name(ctx: _Ctx, name: str, specs: dict[str, TensorSpec]) -> list[TensorSpec]:
    """A required forward argument the main-input rules did not cover, synthesised from its name."""
    seq = ctx.seq or _text_seq(ctx)
    if name in _PIXELS or name.endswith("pixel_values"):
        return _pixels(ctx, "pixel_values_videos" if "video" in name else "pixel_values") if name in ("pixel_values", "pixel_values_videos") else [
            TensorSpec(name, _pixels(ctx, "pixel_values")[0].shape)
        ]
    if name in _AUDIO_FEATURES:
        return _audio_features(ctx, name)
    if name in _AUDIO_VALUES:
        return _audio_values(ctx, name)
    if name == "past_values":
        return _time_series(ctx)
    if name == "bbox":
        return [_bbox(ctx, seq)]
    if name.endswith("input_ids"):  # qformer_input_ids, decoder_input_ids, ...
        n = DEFAULT_QUERY_TOKENS if "qformer" in name else seq
        sub = _sub(ctx.cfg, "qformer_config") if "qformer" in name else None
        return [TensorSpec(name, (ctx.b, n), torch.long, _vocab(sub or ctx.text_cfg), avoid=special_ids(ctx.cfg))]
    if name.endswith("_masks") and name[: -len("masks")] + "pixel_values" in specs:  # SegGPT's prompt masks
        ref = specs[name[: -len("masks")] + "pixel_values"]
        ctx.how.append(f"{name} shaped like {ref.name} {list(ref.shape)}")
        images = [t for t in specs.values() if t.name.endswith("pixel_values") and len(t.shape) == 4] + [TensorSpec(name, ref.shape)]
        # A model that stacks its images along the height into the config's image size (SegGPT
        # puts the prompt above the input): each image that height divided by the images stacked.
        h = ref.shape[2]
        if h % 2 == 0 and len(images) >= 2:
            half = [TensorSpec(t.name, (*t.shape[:2], h // 2, t.shape[3])) for t in images]
            ctx.alternatives.append(Alternative(half, f"images {h // 2}x{ref.shape[3]}: a prompt and an input stacked into the config's {h}x{ref.shape[3]}"))
        return [TensorSpec(name, ref.shape)]
    if name.endswith("merge_sizes"):  # one spatial merge size per image (VideoLLaMA-3's tower)
        g = _patch_grid(ctx)
        m = g["merge"] if g else 1
        return [TensorSpec(name, (ctx.b,), torch.long, data=[m] * ctx.b)]
    if name.endswith(("attention_mask", "_mask")) and name != "bool_masked_pos":
        ref = specs.get(name.replace("attention_mask", "input_ids")) or specs.get("input_ids")
        shape = ref.shape[:2] if ref is not None else (ctx.b, seq)
        return [TensorSpec(name, shape, torch.long, fill=1)]
    if name in ("grid_thw", "image_grid_thw"):
        g = _patch_grid(ctx)
        if g:
            return [TensorSpec(name, (ctx.b, 3), torch.long, data=[g["grid"]] * ctx.b)]
    if name == "hidden_states" and ({"grid_thw", "image_grid_thw"} & set(ctx.params)):
        g = _patch_grid(ctx)
        if g:
            t, gh, gw = g["grid"]
            ctx.how.append(f"{ctx.b} image(s) as {t * gh * gw} patches of {g['dim']} values, grid {gh}x{gw}")
            return [TensorSpec(name, (ctx.b * t * gh * gw, g["dim"]))]
    if name.endswith("_inputs") and _int(_get(ctx.cfg, name[: -len("inputs")] + "seq_len")):
        # Tokenised task text of a fixed length (OneFormer's task_inputs, task_seq_len).
        n = _int(_get(ctx.cfg, name[: -len("inputs")] + "seq_len"))
        vocab = _int(_find(ctx.cfg, "text_encoder_vocab_size", "vocab_size"), 1000) or 1000
        ctx.how.append(f"{name}: {n} token ids (the config's {name[: -len('inputs')]}seq_len)")
        return [TensorSpec(name, (ctx.b, n), torch.long, vocab, avoid=special_ids(ctx.cfg))]
    if name.endswith(("embeds", "hidden_states", "latents", "inputs", "states")):
        return _vectors(ctx, name, seq)
    return []


def _vectors(ctx: _Ctx, name: str, seq: int) -> list[TensorSpec]:
    """A required sequence of vectors (query embeddings, latents, hidden states): ``(batch, n, width)``
    with the config's width, and ``(batch, width, n)`` as the alternative (convolutional decoders)."""
    width = _int(_get(ctx.cfg, "hidden_size", "d_model", "latent_dim", "embed_dim", "n_embd", "dim"))
    if not width:
        return []
    n = _int(_get(ctx.cfg, "num_query_tokens", "num_latents")) if "query" in name or "latent" in name else None
    n = n or seq
    block = _int(_get(ctx.cfg, "block_size"))
    if block and "context" not in name and any(k.startswith("context") for k in ctx.params) and block < n:
        # A block-diffusion draft model: one block of block_size positions to denoise, beside its context.
        ctx.how.append(f"{name}: one block of {block} vectors of the config's width {width} (the config's block_size), beside the context")
        return [TensorSpec(name, (ctx.b, block, width))]
    layers = _get(ctx.cfg, "target_layer_ids")
    if "context" in name and isinstance(layers, (list, tuple)) and len(layers) > 1:
        # A draft model reads the target model's hidden states from several layers, concatenated.
        ctx.how.append(f"{name}: {n} vectors of {len(layers)} target layers x the width {width} (the config's target_layer_ids)")
        return [TensorSpec(name, (ctx.b, n, width * len(layers)))]
    ctx.how.append(f"{name}: {n} vectors of the config's width {width}")
    ctx.alternatives.append(Alternative([TensorSpec(name, (ctx.b, width, n))], f"{name} laid out (batch, width, length)"))
    # A convolutional encoder named its input hidden_states but takes a signal (VibeVoice's tokenizer):
    # the channels of its first Conv1d, one second of samples.
    conv = _first_module(ctx.model, (nn.Conv1d,))
    if conv is not None and conv.in_channels != width:
        samples, stride = ctx.opts.seq_len or DEFAULT_AUDIO_SAMPLES, audio_stride(ctx.cfg) or 1
        samples = -(-samples // stride) * stride
        ctx.alternatives.append(
            Alternative([TensorSpec(name, (ctx.b, conv.in_channels, samples))], f"{name} as a signal of {conv.in_channels} channel(s) x {samples} samples for the first Conv1d")
        )
    return [TensorSpec(name, (ctx.b, n, width))]


def _count_features(model: nn.Module, modality: str, inputs: dict[str, torch.Tensor], batch: int) -> tuple[int | None, str]:
    """How many ``modality`` features one sample makes, from the model's own ``get_<modality>_features``."""
    fn = None
    for holder in (model, getattr(model, "model", None), getattr(model, "base_model", None)):
        fn = getattr(holder, f"get_{modality}_features", None) if holder is not None else None
        if fn is not None:
            break
    if fn is None:
        return None, f"the model has no get_{modality}_features"
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    kwargs = {k: v for k, v in inputs.items() if k in params and k not in ("input_ids", "attention_mask")}
    first = next(iter(params), None)
    pixel = {"image": "pixel_values", "video": "pixel_values_videos", "audio": "input_features"}[modality]
    if first is not None and first not in kwargs and pixel in inputs:
        kwargs[first] = inputs[pixel]
    try:
        with torch.no_grad():
            out = fn(**kwargs)
    except Exception as e:  # the forward will fail the same way and say why
        return None, f"get_{modality}_features failed: {type(e).__name__}: {str(e)[:120]}"
    tensors = _feature_tensors(out)
    if not tensors:
        return None, f"get_{modality}_features returned no tensor"
    # transformers checks ``n_tokens * embedding_width == features.numel()``: one token per feature row,
    # and the rows must be as wide as the text embeddings.
    width = _embedding_width(model)
    feature_width = int(tensors[0].shape[-1])
    if width and feature_width != width:
        return None, f"its {modality} features are {feature_width} wide, its text embeddings {width} (the config is inconsistent)"
    rows = sum(t.numel() // max(int(t.shape[-1]), 1) for t in tensors)
    return max(rows // max(batch, 1), 1), ""


def _embedding_width(model: nn.Module) -> int | None:
    try:
        emb = model.get_input_embeddings()
    except Exception:
        return None
    w = getattr(emb, "weight", None)
    return int(w.shape[-1]) if isinstance(w, torch.Tensor) and w.dim() == 2 else None


def _feature_tensors(out) -> list[torch.Tensor]:
    """The feature tensors in what ``get_*_features`` returns (a tensor, a tuple of them, or an output)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):  # a ModelOutput: transformers puts the projected features in pooler_output
        v = out.get("pooler_output")
        if v is None:
            v = out.get("last_hidden_state")
        return _feature_tensors(v) if v is not None else []
    if isinstance(out, (list, tuple)):
        return [t for x in out for t in _feature_tensors(x)]
    return []
