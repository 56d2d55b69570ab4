"""Everything a user can ask of a report, as frozen values checked once.

Every face (the CLI, the web, the API, the tracker, a Python caller) builds
these objects; every stage reads them and none changes them.  A bad value is
refused when the object is made, with a one-line :class:`~neurarch.errors.InputError`
naming the option (``--seq-len`` on the CLI, the same name in the API), so a
face never needs checks of its own.

The lists here (modes, precisions, optimizers, attention implementations,
tasks) are the only ones: the CLI's choices, the web's query parameters and
the stages' dispatch all read them.

This module imports nothing heavy (no torch, no transformers): building and
checking options is instant, so a bad flag is answered before any import.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from . import limits
from .errors import InputError

# --------------------------------------------------------------------------
# The lists
# --------------------------------------------------------------------------

MODES: tuple[str, ...] = ("full", "lora", "qlora", "inference")
PRECISIONS: tuple[str, ...] = ("fp32", "bf16-mixed", "fp16-mixed", "bf16")
OPTIMIZERS: tuple[str, ...] = ("adamw", "adamw-fused", "adamw-8bit", "sgd", "adafactor", "adafactor-trainer")
# What each optimizer is on the card, as the report says it (plan.train.make_optimizer builds them).
OPTIMIZER_IMPLEMENTATIONS: dict[str, str] = {
    "adamw": "torch.optim.AdamW, foreach (multi-tensor: torch's default on CUDA; its step keeps a scratch copy per parameter group)",
    "adamw-fused": "torch.optim.AdamW(fused=True) (the Hugging Face Trainer's adamw_torch_fused, its default with torch >= 2.8): no multi-tensor scratch",
    "adamw-8bit": "bitsandbytes AdamW8bit (blockwise 8-bit state)",
    "sgd": "torch.optim.SGD, momentum 0.9, foreach",
    "adafactor": "torch.optim.Adafactor, foreach",
    "adafactor-trainer": 'transformers.optimization.Adafactor(scale_parameter=False, relative_step=False), what the Hugging Face Trainer\'s optim="adafactor" runs: a per-parameter loop, no first moment',
}
# transformers' names (config._attn_implementation); None: what transformers picks on a CUDA card.
ATTENTIONS: tuple[str, ...] = ("eager", "sdpa", "flash_attention_2")
ADAPTER_DTYPES: tuple[str, ...] = ("fp32", "bf16")
# --task: the head a user fine-tunes (build.TASKS maps each to transformers' auto-mappings).
TASKS: tuple[str, ...] = ("causal-lm", "seq-cls", "token-cls", "masked-lm", "seq2seq-lm", "backbone")
FORMATS: tuple[str, ...] = ("text", "json", "jsonl", "markdown", "html")

DEFAULT_LORA_RANK = 16
DEFAULT_HEADROOM = 1.15  # a card fits a batch when peak_bytes x headroom <= its memory
DEFAULT_CARD = "A10G"  # the cost's headline card
DEFAULT_TIMEOUT_S = 300
DEFAULT_PLAN_TIMEOUT_S = 1200  # --plan simulates several modes and batches
DEFAULT_SAMPLES = 50_000  # samples per epoch of a priced run when neither samples nor tokens is given


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _positive_int(name: str, value: object, upper: int | None = None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"{_flag(name)} must be a positive integer, got {value!r}", field=name)
    if upper is not None and value > upper:
        raise InputError(f"{_flag(name)} = {value:,} is beyond neurarch's limit of {upper:,}", field=name)


def _one_of(name: str, value: object, allowed: tuple[str, ...], what: str | None = None) -> None:
    if value not in allowed:
        raise InputError(f"unknown {what or _flag(name)} {value!r}; choose one of {', '.join(allowed)}", field=name)


# --------------------------------------------------------------------------
# The option objects
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class InputOptions:
    """The input the model is traced with (``--batch``, ``--seq-len`` ...); None = the model's default."""

    batch: int = 1
    seq_len: Optional[int] = None
    image_size: Optional[int] = None
    input_shape: Optional[tuple[int, ...]] = None  # per-sample shape for plain modules
    # Encoder-decoders: the decoder's tokens (the labels' length); None = as many as the encoder's.
    decoder_seq_len: Optional[int] = None

    def __post_init__(self) -> None:
        if self.input_shape is not None and not isinstance(self.input_shape, tuple):
            object.__setattr__(self, "input_shape", tuple(self.input_shape))
        self.validate()

    def validate(self) -> None:
        for name in ("batch", "seq_len", "decoder_seq_len", "image_size"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise InputError(f"{_flag(name)} must be a positive integer, got {v!r}", field=name)
        limits.check_option("batch", self.batch, limits.MAX_BATCH)
        limits.check_option("seq_len", self.seq_len, limits.MAX_SEQ_LEN)
        limits.check_option("decoder_seq_len", self.decoder_seq_len, limits.MAX_SEQ_LEN)
        limits.check_option("image_size", self.image_size, limits.MAX_IMAGE)
        if self.input_shape is not None:
            if not self.input_shape or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in self.input_shape):
                raise InputError(f"--input-shape must be positive integers, got {','.join(map(str, self.input_shape))}", field="input_shape")
            n = self.batch
            for d in self.input_shape:
                n *= d
            if n > limits.MAX_INPUT_ELEMENTS:
                raise InputError(f"--input-shape {self.input_shape} x batch {self.batch} is beyond neurarch's limit of {limits.MAX_INPUT_ELEMENTS:,} elements", field="input_shape")


def parse_shape(text: str) -> tuple[int, ...]:
    """``--input-shape 3,224,224`` (or ``3x224x224``) -> ``(3, 224, 224)``."""
    try:
        dims = tuple(int(x) for x in text.replace("x", ",").split(",") if x.strip())
    except ValueError:
        raise InputError(f"--input-shape must look like 3,224,224 or 64, got {text!r}", field="input_shape") from None
    if not dims:
        raise InputError(f"--input-shape must look like 3,224,224 or 64, got {text!r}", field="input_shape")
    return dims


@dataclass(frozen=True)
class CostOptions:
    """A training run to price (``--cost`` / ``--plan``)."""

    epochs: int = 10
    samples: Optional[int] = None  # per epoch; default 50,000 when tokens is None
    tokens: Optional[int] = None  # per epoch, for language models
    batch: Optional[int] = None  # default 32, or the largest that fits
    precision: str = "bf16-mixed"
    card: str = DEFAULT_CARD  # the headline card
    cards: tuple[str, ...] = ()  # extra cards (custom NAME:GB or built-in names)
    prices: dict[str, str] = field(default_factory=dict)  # card name -> USD per hour override

    def __post_init__(self) -> None:
        if not isinstance(self.cards, tuple):
            object.__setattr__(self, "cards", tuple(self.cards))
        self.validate()

    def validate(self) -> None:
        for name in ("epochs", "samples", "tokens", "batch"):
            _positive_int(name, getattr(self, name))
        if self.epochs > 100_000 or (self.samples or 0) > 10**13 or (self.tokens or 0) > 10**16:
            raise InputError(
                "--epochs/--samples/--tokens are beyond neurarch's limits (1e5 epochs, 1e13 samples, 1e16 tokens)",
                field="epochs" if self.epochs > 100_000 else ("samples" if (self.samples or 0) > 10**13 else "tokens"),
            )
        _one_of("precision", self.precision, PRECISIONS)
        if not isinstance(self.card, str) or not self.card.strip():
            raise InputError(f"--card needs a card name, got {self.card!r}", field="card")

    @property
    def samples_per_epoch(self) -> Optional[int]:
        """Samples per epoch of the priced run (50,000 unless tokens are given)."""
        return self.samples if self.samples is not None else (None if self.tokens is not None else DEFAULT_SAMPLES)


@dataclass(frozen=True)
class PlanOptions:
    """The memory plan (``--plan``): which modes, and how the run is set up."""

    modes: tuple[str, ...] = MODES
    optimizer: str = "adamw"
    lora_rank: int = DEFAULT_LORA_RANK
    grad_checkpointing: bool = False
    grad_accumulation: int = 1  # the Trainer's gradient_accumulation_steps (micro-batches per optimizer step)
    # transformers' gradient_checkpointing_kwargs={"use_reentrant": True}; only with grad_checkpointing
    grad_checkpointing_reentrant: bool = False
    # optimizer.zero_grad(set_to_none=...): False keeps zeroed gradients between steps (torch 1.x)
    zero_grad_set_to_none: bool = True
    headroom: float = DEFAULT_HEADROOM
    context_len: Optional[int] = None  # inference KV cache length (default: the input's)
    attn_implementation: Optional[str] = None  # eager | sdpa | flash_attention_2; None: transformers' pick on CUDA
    lora_targets: Optional[tuple[str, ...]] = None  # peft target_modules; None = all-linear
    lora_dropout: float = 0.0  # peft's default
    adapter_dtype: Optional[str] = None  # None = as peft casts (fp32 adapters); "bf16"
    task: Optional[str] = None  # one of TASKS; None = architectures[0]
    num_labels: int = 2  # classifier heads (--task seq-cls / token-cls)

    def __post_init__(self) -> None:
        if not isinstance(self.modes, tuple):
            object.__setattr__(self, "modes", tuple(self.modes))
        if self.lora_targets is not None and not isinstance(self.lora_targets, tuple):
            object.__setattr__(self, "lora_targets", tuple(self.lora_targets))
        self.validate()

    def validate(self, precision: Optional[str] = None) -> None:
        bad = [m for m in self.modes if m not in MODES]
        if bad or not self.modes:
            raise InputError(f"unknown --modes {','.join(map(str, bad)) or '(none)'}; choose from {', '.join(MODES)}", field="modes")
        _one_of("optimizer", self.optimizer, OPTIMIZERS)
        if isinstance(self.lora_rank, bool) or not isinstance(self.lora_rank, int) or not 1 <= self.lora_rank <= 4096:
            raise InputError(f"--lora-rank must be an integer from 1 to 4096, got {self.lora_rank!r}", field="lora_rank")
        if isinstance(self.grad_accumulation, bool) or not isinstance(self.grad_accumulation, int) or not 1 <= self.grad_accumulation <= 65_536:
            raise InputError(f"--grad-accumulation must be an integer from 1 to 65,536, got {self.grad_accumulation!r}", field="grad_accumulation")
        for name in ("grad_checkpointing_reentrant", "zero_grad_set_to_none"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"{_flag(name)} must be true or false, got {getattr(self, name)!r}", field=name)
        if self.grad_checkpointing_reentrant and not self.grad_checkpointing:
            raise InputError("--grad-checkpointing-reentrant needs --grad-checkpointing (it says how the checkpointed layers recompute)", field="grad_checkpointing_reentrant")
        if not isinstance(self.headroom, (int, float)) or isinstance(self.headroom, bool) or not math.isfinite(self.headroom) or not 1.0 <= self.headroom <= 10.0:
            raise InputError(f"--headroom must be between 1 and 10, got {self.headroom!r}", field="headroom")
        if self.context_len is not None and (isinstance(self.context_len, bool) or not isinstance(self.context_len, int) or not 1 <= self.context_len <= (1 << 22)):
            raise InputError(f"--context-len must be between 1 and {1 << 22:,}, got {self.context_len!r}", field="context_len")
        if self.attn_implementation is not None:
            _one_of("attn_implementation", self.attn_implementation, ATTENTIONS)
        if self.lora_targets is not None and (not self.lora_targets or not all(isinstance(t, str) and t.strip() for t in self.lora_targets)):
            raise InputError("--lora-targets needs module names such as q_proj,v_proj, or all-linear", field="lora_targets")
        if not isinstance(self.lora_dropout, (int, float)) or isinstance(self.lora_dropout, bool) or not 0.0 <= self.lora_dropout < 1.0:
            raise InputError(f"--lora-dropout must be at least 0 and below 1, got {self.lora_dropout!r}", field="lora_dropout")
        if self.adapter_dtype is not None:
            _one_of("adapter_dtype", self.adapter_dtype, ADAPTER_DTYPES)
        if self.task is not None:
            _one_of("task", self.task, TASKS)
        if isinstance(self.num_labels, bool) or not isinstance(self.num_labels, int) or not 1 <= self.num_labels <= 1_000_000:
            raise InputError(f"--num-labels must be an integer from 1 to 1,000,000, got {self.num_labels!r}", field="num_labels")
        if precision is not None:
            _one_of("precision", precision, PRECISIONS)
            if self.attn_implementation == "flash_attention_2" and precision == "fp32":
                raise InputError("flash_attention_2 runs in fp16/bf16 only (flash-attn refuses fp32): choose --precision bf16-mixed, fp16-mixed or bf16", field="attn_implementation")


@dataclass(frozen=True)
class Options:
    """Everything that changes a report (the CLI flags, as one object)."""

    inputs: InputOptions = field(default_factory=InputOptions)
    depth: Optional[int] = None
    revision: Optional[str] = None
    trust_remote_code: bool = False
    offline: Optional[bool] = None  # None: follow HF_HUB_OFFLINE
    backward: bool = True
    timeout_s: Optional[float] = None  # None: 300 s, or 1200 s with a plan
    cost: Optional[CostOptions] = None  # price a training run
    plan: Optional[PlanOptions] = None  # simulate memory per mode and fit every card
    precision: str = "bf16-mixed"  # training precision the plan and the verifier assume
    from_scratch: bool = False  # training from scratch (init rules apply) rather than fine-tuning
    disable: frozenset[str] = frozenset()  # verifier rule ids turned off
    verify: bool = True
    cache: bool = True  # read and write the simulation cache on disk (--no-cache: recompute, store nothing)

    def __post_init__(self) -> None:
        if not isinstance(self.disable, frozenset):
            object.__setattr__(self, "disable", frozenset(self.disable))
        self.validate()

    def validate(self) -> None:
        _positive_int("depth", self.depth)
        if self.timeout_s is not None and (isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)) or not math.isfinite(self.timeout_s) or self.timeout_s <= 0):
            raise InputError(f"--timeout must be a positive number of seconds, got {self.timeout_s!r}", field="timeout_s")
        _one_of("precision", self.precision, PRECISIONS)
        if self.plan is not None:
            self.plan.validate(self.precision)

    @property
    def priced(self) -> Optional[CostOptions]:
        """The run the cost prices: ``cost``, or with a plan and no cost, the default run at the plan's precision."""
        if self.cost is not None:
            return self.cost
        return CostOptions(precision=self.precision) if self.plan is not None else None

    @property
    def time_limit_s(self) -> float:
        """The per-model time limit: ``timeout_s``, else 300 s (1200 s with a plan)."""
        if self.timeout_s is not None:
            return self.timeout_s
        return DEFAULT_PLAN_TIMEOUT_S if self.plan is not None else DEFAULT_TIMEOUT_S
