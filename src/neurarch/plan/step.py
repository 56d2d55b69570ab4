"""One training step, written once, run two ways.

The simulator (:mod:`neurarch.plan.memory`) runs these functions on fake
tensors; the measurement (:mod:`neurarch.plan.measure`) runs the very same
functions on real tensors.  Sharing the code is what makes the comparison
fair: the same modules, the same loss, the same optimizer calls, the same
Python references dropped at the same lines.

The step is what ``transformers.Trainer`` does: forward with labels, keep only
the loss (the output object with its logits is dropped before backward),
``loss.backward()``, ``optimizer.step()``, ``optimizer.zero_grad(set_to_none=True)``.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
from torch import nn

from ..errors import InputError
from ..inputs import InputPlan, TensorSpec
from ..introspect import forward_params as _forward_params
from ..options import (  # noqa: F401  (re-exported for the planner's callers)
    ADAPTER_DTYPES,
    ATTENTIONS,
    DEFAULT_LORA_RANK,
    MODES,
    OPTIMIZER_IMPLEMENTATIONS,
    OPTIMIZERS,
    PRECISIONS,
)

# The lists of modes, precisions, optimizers, attentions and adapter dtypes live in neurarch.options.
DEVICES = ("cpu", "cuda")

# Learning rate and friends: any value gives the same memory; these are the
# torch defaults except lr (torch.optim.AdamW's default 1e-3 is a pre-training value).
LR = 1e-4
SGD_MOMENTUM = 0.9  # momentum SGD keeps one buffer per parameter; plain SGD keeps none


class PlanOptionError(InputError):
    """A memory-plan option that neurarch does not know or cannot honour."""


@dataclass(frozen=True)
class TrainSetup:
    """What is being simulated: the CLI's memory options as one value."""

    mode: str = "full"
    precision: str = "bf16-mixed"
    optimizer: str = "adamw"
    grad_checkpointing: bool = False
    # The Trainer's gradient_accumulation_steps: micro-batches whose gradients add up before
    # one optimizer step.  From the second on, each runs with the gradients of the ones before
    # alive; the third and later repeat the second's state, so at most two are run.
    grad_accumulation: int = 1
    lora_rank: int = DEFAULT_LORA_RANK
    # peft's target_modules: None = neurarch's all-linear rule (see lora_targets); else module
    # names matched as peft matches them (the whole name or its last components).
    lora_targets: tuple[str, ...] | None = None
    lora_dropout: float = 0.0  # peft's default; > 0 keeps a dropped copy of each adapted layer's input
    # Adapter weights: None = as peft casts them (autocast_adapter_dtype=True: fp32 over a
    # bf16/fp16 base); "bf16" keeps them in the base's low precision (pure-bf16 training).
    adapter_dtype: str | None = None
    # The attention the model was built with (transformers' name); flash_attention_2 is
    # simulated with CUDA's flash kernel (the flash-attn package needs CUDA to install).
    attn_implementation: str | None = None
    # optimizer.zero_grad(set_to_none=...): True (torch 2's default) frees the gradients after
    # each optimizer step; False zeroes them in place (torch 1.x's default, and the Trainer's
    # model.zero_grad() of its time), so from the second step on they live through forward too.
    zero_grad_set_to_none: bool = True
    # transformers' gradient_checkpointing_kwargs={"use_reentrant": True} (torch's default
    # before 2.4): torch.utils.checkpoint's autograd.Function, recomputed from backward.
    grad_checkpointing_reentrant: bool = False
    # Whose kernels' behaviour to follow where CPU and CUDA differ (see docs/accuracy.md):
    # "cuda" = multi-tensor (foreach) optimizer, the default on CUDA; "cpu" = the
    # single-tensor loop torch uses for CPU tensors.
    device: str = "cuda"

    def validate(self) -> None:
        """The options as :class:`~neurarch.options.PlanOptions` checks them (the one check,
        with the messages users see), and the device."""
        from ..options import PlanOptions

        if self.device not in DEVICES:
            raise PlanOptionError(f"unknown memory device {self.device!r}: choose one of {', '.join(DEVICES)}", field="device")
        try:
            PlanOptions(
                modes=(self.mode,),
                optimizer=self.optimizer,
                lora_rank=self.lora_rank,
                grad_checkpointing=self.grad_checkpointing,
                grad_checkpointing_reentrant=self.grad_checkpointing_reentrant,
                zero_grad_set_to_none=self.zero_grad_set_to_none,
                grad_accumulation=self.grad_accumulation,
                attn_implementation=self.attn_implementation,
                lora_targets=self.lora_targets,
                lora_dropout=self.lora_dropout,
                adapter_dtype=self.adapter_dtype,
            ).validate(self.precision)
        except PlanOptionError:
            raise
        except InputError as e:
            raise PlanOptionError(str(e), field=e.field) from None

    @property
    def compute_dtype(self) -> torch.dtype:
        return {"fp32": torch.float32, "bf16-mixed": torch.bfloat16, "fp16-mixed": torch.float16, "bf16": torch.bfloat16}[self.precision]

    @property
    def autocast(self) -> bool:
        return self.precision.endswith("-mixed")

    @property
    def weight_dtype(self) -> torch.dtype:
        """The dtype trainable weights are stored in (fp32 masters under mixed precision)."""
        return torch.bfloat16 if self.precision == "bf16" else torch.float32

    @property
    def frozen_dtype(self) -> torch.dtype:
        """Frozen base weights (LoRA) need no fp32 master: they are kept in the compute dtype."""
        return self.compute_dtype


# --------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------


def _head_modules(model: nn.Module) -> set[int]:
    """The output head, which LoRA leaves alone: peft's own 'all-linear' rule.

    peft (tuners_utils._maybe_include_all_linear_layers) excludes the output
    embeddings and, for classifiers, the module named in SEQ_CLS_HEAD_NAMES.
    """
    heads: set[int] = set()
    get_out = getattr(model, "get_output_embeddings", None)
    if callable(get_out):
        try:
            out = get_out()
        except Exception:
            out = None
        if isinstance(out, nn.Module):
            heads.add(id(out))
    from peft.utils.constants import SEQ_CLS_HEAD_NAMES

    for name in SEQ_CLS_HEAD_NAMES:
        head = getattr(model, name, None)
        if isinstance(head, nn.Module):
            heads.update(id(m) for m in head.modules())
    return heads


def lora_targets(model: nn.Module, rank: int) -> list[str]:
    """Qualified names of the layers LoRA adapts.

    Every linear layer but the head (peft's 'all-linear' rule), and not the
    subclasses that override ``forward`` (MoE routers).  For a CNN —
    a model whose convolutions hold more weights than its linear layers — the
    convolutions too, so resnet-50 gets adapters; grouped convolutions only
    where the groups divide the rank (peft's limit).  Convolutions in
    transformer models (whisper's stem, wav2vec2's feature encoder) are left
    alone, as peft's 'all-linear' leaves them.
    """
    from transformers.pytorch_utils import Conv1D

    heads = _head_modules(model)
    linear, conv = [], []
    linear_n = conv_n = 0
    for name, mod in model.named_modules():
        if not name or id(mod) in heads:
            continue
        n = sum(p.numel() for p in mod.parameters(recurse=False))
        if isinstance(mod, (nn.Linear, Conv1D)):
            # A subclass with its own forward (a MoE router returning scores and logits)
            # is no plain matmul for an adapter to add to; peft's wrapper would break it.
            if type(mod).forward not in (nn.Linear.forward, Conv1D.forward):
                continue
            linear.append(name)
            linear_n += n
        elif isinstance(mod, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            conv_n += n
            if rank % mod.groups == 0:
                conv.append(name)
    chosen = linear + conv if conv_n > linear_n else linear
    return [name for name in chosen if _peft_accepts(model, name)]


def _peft_accepts(model: nn.Module, name: str) -> bool:
    """Whether peft lets LoRA adapt this module (it refuses some by name: Mamba's
    ``out_proj`` and ``conv1d``), asked with peft's own check."""
    try:
        from peft import LoraConfig
        from peft.tuners.tuners_utils import _check_lora_target_modules_mamba
    except ImportError:  # another peft: its own error, if any, comes from get_peft_model
        return True
    try:
        _check_lora_target_modules_mamba(LoraConfig(), model, name.rsplit(".", 1)[-1])
    except ValueError:
        return False
    return True


def _keep_fp32(model: nn.Module) -> list[str]:
    names = getattr(model, "_keep_in_fp32_modules", None) or []
    return list(names) if isinstance(names, (list, tuple, set)) else []


def cast_model(model: nn.Module, dtype: torch.dtype) -> None:
    """What ``from_pretrained(dtype=...)`` does: floating parameters and buffers
    to ``dtype``, except the modules the class keeps in fp32 (``_keep_in_fp32_modules``,
    matched on a component of the qualified name, as transformers matches it)."""
    keep = _keep_fp32(model)
    for name, mod in model.named_modules():
        if keep and any(k in name.split(".") for k in keep):
            continue
        for p in mod._parameters.values():
            if p is not None and p.dtype.is_floating_point and p.dtype != dtype:
                p.data = p.data.to(dtype)
        for bname, b in mod._buffers.items():
            if b is not None and b.dtype.is_floating_point and b.dtype != dtype:
                mod._buffers[bname] = b.to(dtype)


_LAYERDROP = ("layerdrop", "encoder_layerdrop", "decoder_layerdrop")


def no_random_structure(model: nn.Module) -> None:
    """Turn off training tricks whose tensor *sizes* follow a coin toss.

    * LayerDrop (wav2vec2's default 0.1) skips whole layers at random;
    * SpecAugment (wav2vec2/hubert ``apply_spec_augment``) writes a random
      boolean mask into the features, whose backward indexes by that mask.

    A step's memory would be random; fake tensors have no values to toss.
    With both off we simulate (and measure) the step that keeps every layer:
    the worst case for LayerDrop, and for SpecAugment a difference of an
    in-place write and its index temporaries.
    """
    for mod in model.modules():
        cfg = getattr(mod, "config", None)
        if cfg is None:
            continue
        for name in _LAYERDROP:
            if isinstance(getattr(cfg, name, None), (int, float)) and getattr(cfg, name) > 0:
                setattr(cfg, name, 0.0)
        if getattr(cfg, "apply_spec_augment", False):
            cfg.apply_spec_augment = False


def prepare(model: nn.Module, setup: TrainSetup) -> nn.Module:
    """Put a model in the state the step needs; returns the model to train (maybe a PeftModel).

    Works the same on a meta model (simulation) and a real one (measurement).
    """
    setup.validate()
    no_random_structure(model)
    if setup.mode == "inference":
        cast_model(model, setup.compute_dtype)
        for p in model.parameters():
            p.requires_grad_(False)
        return model.eval()
    if setup.grad_checkpointing:
        enable_checkpointing(model, setup)
    if setup.mode == "full":
        # fp32 too: a model built from sub-configs of different dtypes (a VLM whose text
        # config says bfloat16) trains with one master-weight dtype, as from_pretrained(dtype=...) loads it.
        cast_model(model, setup.weight_dtype)
        for p in model.parameters():
            p.requires_grad_(True)
        return model.train()
    if setup.mode == "lora":
        return _inject_lora(model, setup).train()
    if setup.mode == "qlora":
        return _inject_qlora(model, setup).train()
    raise PlanOptionError(f"memory mode {setup.mode!r} is not supported yet")


def _recompute_under_forward_modes():
    """``context_fn`` for ``torch.utils.checkpoint``: recompute under the
    torch-function modes that were active in the forward pass.

    Autograd does not carry Python torch-function modes into backward, where a
    non-reentrant checkpoint recomputes its block.  On a device that changes
    nothing; in the simulator the recomputation would otherwise skip
    :class:`~neurarch.plan.semantics.CudaKernels` (CUDA's attention and
    dropout kernels), save other tensors than the forward pass did, and
    torch's checkpoint refuses that ("A different number of tensors was saved
    during the original forward and recomputation").
    """
    stack = list(torch.overrides._get_current_function_mode_stack())

    @contextlib.contextmanager
    def recompute() -> Iterator[None]:
        active = torch.overrides._get_current_function_mode_stack()
        with contextlib.ExitStack() as modes:
            for mode in stack:
                if mode not in active:
                    modes.enter_context(mode)
            yield

    return contextlib.nullcontext(), recompute()


# What transformers uses by default (use_reentrant=False), with the recompute fix above.
CHECKPOINT_KWARGS = {"use_reentrant": False, "context_fn": _recompute_under_forward_modes}
# gradient_checkpointing_kwargs={"use_reentrant": True}: torch's CheckpointFunction, which
# takes no context_fn (it recomputes inside its own backward, see _ReentrantUnderForwardModes).
REENTRANT_KWARGS = {"use_reentrant": True}


def checkpoint_kwargs(setup: TrainSetup) -> dict:
    return dict(REENTRANT_KWARGS if setup.grad_checkpointing_reentrant else CHECKPOINT_KWARGS)


def enable_checkpointing(model: nn.Module, setup: TrainSetup | None = None) -> None:
    """Gradient checkpointing as ``model.gradient_checkpointing_enable()`` turns
    it on (non-reentrant unless the setup asks for reentrant, every layer the
    class marks), which the Trainer calls for ``gradient_checkpointing=True``."""
    kwargs = checkpoint_kwargs(setup) if setup is not None else dict(CHECKPOINT_KWARGS)
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise PlanOptionError(f"{type(model).__name__} has no gradient checkpointing switch (transformers models that support it do)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        elif hasattr(model, "gradient_checkpointing_enable"):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        else:
            raise PlanOptionError(f"{type(model).__name__} has no gradient checkpointing switch (transformers models that support it do)")


def _adapted(model: nn.Module, setup: TrainSetup) -> list[str]:
    """The modules LoRA adapts: the all-linear rule, or the user's names as peft matches them."""
    if setup.lora_targets is None or tuple(setup.lora_targets) == ("all-linear",):
        targets = lora_targets(model, setup.lora_rank)
        if not targets:
            raise PlanOptionError(f"{type(model).__name__} has no linear or convolution layer for LoRA to adapt")
        return targets
    from peft.tuners.tuners_utils import check_target_module_exists

    wanted = [t.strip() for t in setup.lora_targets]
    cfg = _lora_config(setup, wanted)
    targets = [name for name, _ in model.named_modules() if name and check_target_module_exists(cfg, name)]
    if not targets:
        some = sorted({name.rsplit(".", 1)[-1] for name, mod in model.named_modules() if isinstance(mod, nn.Linear)})[:12]
        raise PlanOptionError(f"--lora-targets {','.join(wanted)} matches no module of {type(model).__name__} (its linear layers are named {', '.join(some) or 'nothing'})")
    return targets


def _lora_config(setup: TrainSetup, targets: list[str]):
    from peft import LoraConfig

    # lora_alpha does not change memory; dropout does (a mask and a dropped copy of the input).
    return LoraConfig(r=setup.lora_rank, target_modules=targets, lora_dropout=float(setup.lora_dropout))


def _get_peft_model(model: nn.Module, setup: TrainSetup, targets: list[str]) -> nn.Module:
    from peft import get_peft_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # peft's default (autocast_adapter_dtype=True) keeps adapters in fp32 over a bf16/fp16 base.
        return get_peft_model(model, _lora_config(setup, targets), autocast_adapter_dtype=setup.adapter_dtype != "bf16")


def _inject_lora(model: nn.Module, setup: TrainSetup) -> nn.Module:
    targets = _adapted(model, setup)
    cast_model(model, setup.frozen_dtype)
    return _get_peft_model(model, setup, targets)


# QLoRA as the paper and the transformers/peft recipe run it: NF4 base weights
# with double quantization (BitsAndBytesConfig(load_in_4bit=True,
# bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True)), blocks of 64
# (bitsandbytes' default for 4-bit), compute in the precision's dtype.
QLORA_BLOCKSIZE = 64


def _bnb():
    try:
        import bitsandbytes as bnb
        import bitsandbytes.functional as bnbf
    except Exception as e:  # not installed, or no backend for this machine
        raise PlanOptionError(f"QLoRA needs bitsandbytes (pip install bitsandbytes): {type(e).__name__}") from None
    # bitsandbytes builds its 8-bit code book with .tolist() on first use, which
    # fake tensors cannot answer: build it once here, on real tensors.
    if "dynamic" not in bnbf.name2qmap:
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():
            bnbf.name2qmap["dynamic"] = bnbf.create_dynamic_map()
    return bnb


def _inject_qlora(model: nn.Module, setup: TrainSetup) -> nn.Module:
    """Swap the adapted linear layers for bitsandbytes ``Linear4bit`` (what
    ``from_pretrained(quantization_config=...)`` does), run peft's
    ``prepare_model_for_kbit_training`` (non-quantized weights to fp32), then
    inject LoRA; peft picks its own 4-bit LoRA layer.  The weights themselves
    are quantized by :func:`quantize_4bit` (under fake tensors or real ones)."""
    bnb = _bnb()
    from peft import prepare_model_for_kbit_training

    targets = _adapted(model, setup)
    # transformers quantizes every linear layer but the head and the modules the
    # class keeps in fp32 (_keep_in_fp32_modules, e.g. T5's "wo"), whichever
    # layers LoRA adapts; those stay unquantized and may still get adapters.
    from transformers.pytorch_utils import Conv1D

    keep = _keep_fp32(model)
    # transformers' replace_with_bnb_linear: plain nn.Linear and GPT-2's Conv1D (its weight is [in, out]).
    quantize = [n for n in lora_targets(model, setup.lora_rank) if isinstance(model.get_submodule(n), (nn.Linear, Conv1D)) and not any(k in n.split(".") for k in keep)]
    if not quantize:
        raise PlanOptionError(f"{type(model).__name__} has no linear layer for QLoRA to quantize")
    cast_model(model, setup.frozen_dtype)
    for name in quantize:
        old = model.get_submodule(name)
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        n_in, n_out = tuple(old.weight.shape) if isinstance(old, Conv1D) else (old.in_features, old.out_features)
        new = bnb.nn.Linear4bit(n_in, n_out, old.bias is not None, compute_dtype=setup.compute_dtype, compress_statistics=True, quant_type="nf4", device=old.weight.device)
        if old.bias is not None:
            new.bias = nn.Parameter(old.bias.data, requires_grad=False)
        setattr(parent, child, new)
    model.is_loaded_in_4bit = True  # what transformers sets; peft reads it to pick its 4-bit LoRA layer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=setup.grad_checkpointing, gradient_checkpointing_kwargs=checkpoint_kwargs(setup))
    return _get_peft_model(model, setup, targets)


def quantize_4bit(model: nn.Module, seed: int = 0) -> list[torch.Tensor]:
    """Quantize every ``Linear4bit`` weight with bitsandbytes' own NF4 code.

    Call under FakeTensorMode (simulation: only shapes) or on a real model
    (measurement: random weights).  Returns the tensors the quantized weights
    consist of (packed 4-bit data and the quantization statistics).
    """
    bnb = _bnb()
    import bitsandbytes.functional as bnbf

    held: list[torch.Tensor] = []
    for mod in model.modules():
        if not isinstance(mod, bnb.nn.Linear4bit) or mod.weight.dtype == torch.uint8:
            continue
        w = torch.randn(mod.out_features, mod.in_features, dtype=mod.compute_dtype or torch.float32)
        packed, state = bnbf.quantize_4bit(w, blocksize=QLORA_BLOCKSIZE, compress_statistics=True, quant_type="nf4")
        del w
        weight = nn.Parameter(packed, requires_grad=False)
        weight.quant_state = state
        mod.weight = weight
        held.append(packed)
        held.extend(t for t in (state.absmax, state.code, state.offset) if isinstance(t, torch.Tensor))
        if state.state2 is not None:
            held.extend((state.state2.absmax, state.state2.code))
    return held


def trainable(model: nn.Module) -> list[nn.Parameter]:
    seen: set[int] = set()
    out = []
    for p in model.parameters():
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


def warm_up(optimizer: torch.optim.Optimizer, params: list[nn.Parameter], set_to_none: bool = True) -> list[torch.Tensor]:
    """What step 1 leaves for step 2, without its forward and backward: one
    optimizer step on zero gradients makes the optimizer's state (the same
    tensors a real step makes), then ``zero_grad`` as the loop calls it: the
    gradients go (``set_to_none``), or stay, zeroed, for step 2.
    Returns the state's tensors."""
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=set_to_none)
    return [t for state in optimizer.state.values() for t in state.values() if isinstance(t, torch.Tensor)]


def make_optimizer(params: list[nn.Parameter], setup: TrainSetup) -> torch.optim.Optimizer:
    """The optimizer, as torch would pick it on the target device.

    torch.optim picks the multi-tensor (foreach) implementation by default only
    when every parameter is on CUDA (torch/optim/optimizer.py,
    _default_to_fused_or_foreach); for CPU tensors it runs a per-tensor loop.
    """
    foreach = setup.device == "cuda"
    if setup.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=LR, foreach=foreach)
    if setup.optimizer == "adamw-fused":
        # The Trainer's default (optim="adamw_torch_fused" with torch >= 2.8): one fused
        # kernel per parameter group, no multi-tensor scratch.
        return torch.optim.AdamW(params, lr=LR, fused=True)
    if setup.optimizer == "sgd":
        return torch.optim.SGD(params, lr=LR, momentum=SGD_MOMENTUM, foreach=foreach)
    if setup.optimizer == "adafactor":
        return torch.optim.Adafactor(params, lr=LR, foreach=foreach)
    if setup.optimizer == "adamw-8bit":
        # bitsandbytes' blockwise 8-bit AdamW (state in uint8 + per-block scales;
        # tensors under its min_8bit_size keep fp32 state): its own code decides.
        # Its code books (2 x 256 fp32) are built with .tolist() in __init__: on real tensors.
        bnb = _bnb()
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():
            return bnb.optim.AdamW8bit(params, lr=LR)
    raise PlanOptionError(f"optimizer {setup.optimizer!r} is not supported yet")


# --------------------------------------------------------------------------
# The batch and the loss
# --------------------------------------------------------------------------


def label_specs(model: nn.Module, cfg: Any, plan: InputPlan) -> list[TensorSpec]:
    """Labels for the task's own loss, as transformers computes it in forward.

    Language models predict their input ids; seq2seq models the decoder ids;
    classifiers get one class per sample (per token for token classifiers).
    A model without a ``labels`` argument gets none: the step then uses
    ``output.float().sum()`` as the loss.
    """
    params = _forward_params(model)
    if "labels" not in params or cfg is None:
        return []
    cls = type(model).__name__
    by_name = {t.name: t for t in plan.tensors}
    num_labels = int(getattr(cfg, "num_labels", 2) or 2)
    b = plan.batch
    if cls.endswith(("ForCausalLM", "LMHeadModel", "ForMaskedLM")) and "input_ids" in by_name:
        t = by_name["input_ids"]
        return [TensorSpec("labels", t.shape, torch.long, t.high)]
    if cls.endswith("ForConditionalGeneration") and "decoder_input_ids" in by_name:
        t = by_name["decoder_input_ids"]
        return [TensorSpec("labels", t.shape, torch.long, t.high)]
    if cls.endswith("ForConditionalGeneration") and "input_ids" in by_name and _multimodal_decoder(cfg, by_name["input_ids"]):
        # A decoder-only vision (audio) language model (LLaVA, PaliGemma, Qwen2-VL ...): it
        # is fine-tuned as a causal LM on its own text, image tokens included.
        t = by_name["input_ids"]
        return [TensorSpec("labels", t.shape, torch.long, t.high)]
    if cls.endswith("ForTokenClassification") and "input_ids" in by_name:
        return [TensorSpec("labels", by_name["input_ids"].shape, torch.long, num_labels)]
    if cls.endswith(("ForSequenceClassification", "ForImageClassification", "ForAudioClassification")):
        if getattr(cfg, "problem_type", None) == "multi_label_classification":
            return [TensorSpec("labels", (b, num_labels), torch.float32)]
        return [TensorSpec("labels", (b,), torch.long, num_labels)]
    return []


def _multimodal_decoder(cfg: Any, ids: TensorSpec) -> bool:
    """A decoder-only model whose text holds image/video/audio tokens (the input
    planner placed runs of them in its ids)."""
    return not getattr(cfg, "is_encoder_decoder", False) and len(ids.shape) == 2 and bool(getattr(ids, "runs", None))


def _materialise(t: TensorSpec, real: bool, gen: torch.Generator) -> torch.Tensor:
    """One input as the input planner makes it (its own values: masks, grids, special ids)."""
    if real and hasattr(t, "real"):
        return t.real(gen)
    if not real and hasattr(t, "fake"):
        return t.fake()
    if t.dtype.is_floating_point:
        return torch.randn(t.shape, dtype=t.dtype, generator=gen if real else None)
    if t.high is not None:
        return torch.randint(0, max(t.high, 1), t.shape, dtype=t.dtype, generator=gen if real else None)
    return torch.ones(t.shape, dtype=t.dtype)


def make_batch(plan: InputPlan, labels: list[TensorSpec], setup: TrainSetup, *, real: bool, seed: int = 0, values=None) -> dict[str, torch.Tensor]:
    """The inputs and labels: real tensors for a measurement, fake ones (call
    under FakeTensorMode) for a simulation.  With ``values`` (the tracer's
    ValueMode) the planner makes small inputs with known values, as the tracer
    does.  Float inputs follow the weights' dtype when the model runs without
    autocast in a low precision."""
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    if not real and values is not None and hasattr(plan, "make"):
        out.update(plan.make(values))
        if labels:
            out.update(type(plan)(tensors=list(labels), main=labels[0].name, batch=plan.batch).make(values))
    else:
        for t in [*plan.tensors, *labels]:
            out[t.name] = _materialise(t, real, gen)
        out.update(getattr(plan, "kwargs", None) or {})  # the planner's non-tensor arguments
    cast = not setup.autocast and setup.compute_dtype != torch.float32 and (setup.precision == "bf16" or setup.mode == "inference")
    if cast:
        for name, x in out.items():
            if isinstance(x, torch.Tensor) and x.dtype.is_floating_point and name != "labels":
                out[name] = x.to(setup.compute_dtype)
    return out


def _first_float(out) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out if out.dtype.is_floating_point else None
    if isinstance(out, dict) or hasattr(out, "values"):
        vals = list(out.values())
    elif isinstance(out, (tuple, list)):
        vals = list(out)
    else:
        return None
    for v in vals:
        t = _first_float(v)
        if t is not None:
            return t
    return None


def loss_of(out) -> torch.Tensor:
    """The task loss transformers computed, else the first floating output summed."""
    loss = getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    t = _first_float(out)
    if t is None or not t.requires_grad:
        raise PlanOptionError("the model's output has no floating tensor to train on")
    return t.float().sum()


# --------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------


class Observer:
    """What the loop tells whoever watches it (the tracker, the profiler)."""

    @contextlib.contextmanager
    def phase(self, step: int, name: str) -> Iterator[None]:
        yield

    def after_backward(self, model: nn.Module) -> None:
        pass


def autocast_for(setup: TrainSetup, device_type: str):
    if not setup.autocast:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=setup.compute_dtype)


def train(
    model: nn.Module,
    batch: dict[str, torch.Tensor],
    optimizer: torch.optim.Optimizer,
    setup: TrainSetup,
    steps: int,
    observer: Observer,
    *,
    device_type: str = "cpu",
    loss_fn: Callable[[Any], torch.Tensor] = loss_of,
    first_step: int = 1,
) -> None:
    """``steps`` training steps, numbered from ``first_step``; every reference is
    dropped where a training loop drops it.  With gradient accumulation each step
    runs its micro-batches' forward and backward (the loss divided by their
    number, as the Trainer does), at most two (see TrainSetup.grad_accumulation),
    then one optimizer step."""
    accumulate = setup.grad_accumulation
    for step in range(first_step, first_step + steps):
        for _ in range(min(accumulate, 2)):
            with observer.phase(step, "forward"):
                with autocast_for(setup, device_type):
                    out = model(**batch)
                    loss = loss_fn(out)
                    if accumulate > 1:
                        loss = loss / accumulate
                del out
            with observer.phase(step, "backward"):
                loss.backward()
                del loss
                observer.after_backward(model)
        with observer.phase(step, "optimizer"):
            optimizer.step()
            # The same tensors as the Trainer's model.zero_grad(): every trainable parameter's .grad.
            optimizer.zero_grad(set_to_none=setup.zero_grad_set_to_none)
