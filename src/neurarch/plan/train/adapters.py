"""LoRA (peft) and QLoRA (bitsandbytes NF4 + peft) as the published recipes inject them,
and the NF4 quantization of the base weights (under fake tensors or real ones)."""

from __future__ import annotations

import contextlib
import functools
import sys
import warnings
from typing import cast

import torch
from torch import nn

from .model import _keep_fp32, cast_model, checkpoint_kwargs
from .setup import PlanOptionError, TrainSetup


def _import_peft() -> None:
    """Import peft without bitsandbytes, unless bitsandbytes is imported already.

    peft imports bitsandbytes whenever it is installed (``peft.helpers``), which
    pulls in torch's inductor: 2 s or more of a LoRA plan on a CPU machine, for
    a mode with no bitsandbytes layer.  QLoRA imports bitsandbytes itself first
    (:func:`_bnb`); peft's own bitsandbytes layers import it when used, so a
    QLoRA run after a LoRA run in the same process still gets them.
    """
    if "peft" in sys.modules or "bitsandbytes" in sys.modules:
        return
    sys.modules["bitsandbytes"] = None  # type: ignore[assignment]  # `import bitsandbytes` raises ImportError meanwhile
    try:
        import peft  # noqa: F401
    finally:
        if sys.modules.get("bitsandbytes", 0) is None:
            del sys.modules["bitsandbytes"]
    from peft import import_utils

    import_utils.is_bnb_available.cache_clear()  # in case peft asked while it was hidden
    import_utils.is_bnb_4bit_available.cache_clear()


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
    _import_peft()
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
        _import_peft()
        from peft import LoraConfig
        from peft.tuners.tuners_utils import _check_lora_target_modules_mamba
    except ImportError:  # another peft: its own error, if any, comes from get_peft_model
        return True
    try:
        _check_lora_target_modules_mamba(LoraConfig(), model, name.rsplit(".", 1)[-1])
    except ValueError:
        return False
    return True


def _adapted(model: nn.Module, setup: TrainSetup) -> list[str]:
    """The modules LoRA adapts: the all-linear rule, or the user's names as peft matches them."""
    if setup.lora_targets is None or tuple(setup.lora_targets) == ("all-linear",):
        targets = lora_targets(model, setup.lora_rank)
        if not targets:
            raise PlanOptionError(f"{type(model).__name__} has no linear or convolution layer for LoRA to adapt")
        return targets
    _import_peft()
    from peft.tuners.tuners_utils import check_target_module_exists

    wanted = [t.strip() for t in setup.lora_targets]
    cfg = _lora_config(setup, wanted)
    targets = [name for name, _ in model.named_modules() if name and check_target_module_exists(cfg, name)]
    if not targets:
        some = sorted({name.rsplit(".", 1)[-1] for name, mod in model.named_modules() if isinstance(mod, nn.Linear)})[:12]
        raise PlanOptionError(f"--lora-targets {','.join(wanted)} matches no module of {type(model).__name__} (its linear layers are named {', '.join(some) or 'nothing'})")
    return targets


def _lora_config(setup: TrainSetup, targets: list[str]):
    _import_peft()
    from peft import LoraConfig

    # lora_alpha does not change memory; dropout does (a mask and a dropped copy of the input).
    return LoraConfig(r=setup.lora_rank, target_modules=targets, lora_dropout=float(setup.lora_dropout))


def _get_peft_model(model: nn.Module, setup: TrainSetup, targets: list[str]) -> nn.Module:
    _import_peft()
    from peft import get_peft_model

    with warnings.catch_warnings(), _without_bnb_dispatch():
        warnings.simplefilter("ignore")
        # peft's default (autocast_adapter_dtype=True) keeps adapters in fp32 over a bf16/fp16 base.
        return get_peft_model(model, _lora_config(setup, targets), autocast_adapter_dtype=setup.adapter_dtype != "bf16")


@contextlib.contextmanager
def _without_bnb_dispatch():
    """peft's LoRA injection imports bitsandbytes whenever it is installed, to try its
    dispatchers for bitsandbytes layers (2 s or more on a CPU machine: it pulls in
    torch's inductor).  Those dispatchers match bitsandbytes layers only, and a model
    has none while bitsandbytes is not imported: then peft is told it is absent for
    the injection, which adapts the same layers in the same way."""
    if "bitsandbytes" in sys.modules:
        yield
        return
    from peft.tuners.lora import model as lora_model

    saved = lora_model.is_bnb_available, lora_model.is_bnb_4bit_available
    lora_model.is_bnb_available = lora_model.is_bnb_4bit_available = lambda: False  # type: ignore[assignment]
    try:
        yield
    finally:
        lora_model.is_bnb_available, lora_model.is_bnb_4bit_available = saved


def _inject_lora(model: nn.Module, setup: TrainSetup) -> nn.Module:
    targets = _adapted(model, setup)
    cast_model(model, setup.frozen_dtype)
    return _get_peft_model(model, setup, targets)


# QLoRA as the paper and the transformers/peft recipe run it: NF4 base weights
# with double quantization (BitsAndBytesConfig(load_in_4bit=True,
# bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True)), blocks of 64
# (bitsandbytes' default for 4-bit), compute in the precision's dtype.
QLORA_BLOCKSIZE = 64


_SIMULATION_ONLY = [False]


def simulation_only() -> None:
    """This process only simulates, on fake tensors (a plan's forked worker): bitsandbytes,
    when a mode needs it, is imported with its kernels' ``torch.compile`` left to their first
    call (:func:`_import_bnb`)."""
    _SIMULATION_ONLY[0] = True


def _compile_on_first_call(torch_compile, model=None, **kwargs):
    """``torch_compile`` (torch's), with the compiling (and the import of torch's compiler, about
    2 s on a CPU machine) left to the function's first call: the same compiled function then."""
    if model is None:
        return lambda fn: _compile_on_first_call(torch_compile, fn, **kwargs)
    compiled = []

    @functools.wraps(model)
    def call(*args, **kw):
        if not compiled:
            compiled.append(torch_compile(model, **kwargs))
        return compiled[0](*args, **kw)

    return call


def _import_bnb() -> None:
    """Import bitsandbytes; in a process that only simulates, with ``torch.compile`` left
    to each kernel's first call.  bitsandbytes wraps its CPU kernels in ``torch.compile`` as
    it is imported, which imports torch's compiler (2 s of a QLoRA job on this project's
    machine); a simulation never calls those kernels (bitsandbytes' ops on fake tensors run
    their fake implementations), and a process that did would compile them then."""
    if "bitsandbytes" in sys.modules or not _SIMULATION_ONLY[0]:
        import bitsandbytes  # noqa: F401

        return
    real = torch.compile
    torch.compile = functools.partial(_compile_on_first_call, real)  # type: ignore[assignment]  # for the import only
    try:
        import bitsandbytes  # noqa: F401
    finally:
        torch.compile = real


def _bnb():
    try:
        _import_bnb()
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


def qlora_quantized(model: nn.Module, setup: TrainSetup) -> list[str]:
    """Qualified names of the layers QLoRA stores in 4 bits (bitsandbytes ``Linear4bit``).

    transformers quantizes every linear layer but the head and the modules the
    class keeps in fp32 (``_keep_in_fp32_modules``, e.g. T5's "wo"), whichever
    layers LoRA adapts; those stay unquantized and may still get adapters.  Like
    transformers' ``replace_with_bnb_linear``: plain ``nn.Linear`` and GPT-2's
    ``Conv1D`` (its weight is [in, out])."""
    from transformers.pytorch_utils import Conv1D

    keep = _keep_fp32(model)
    return [n for n in lora_targets(model, setup.lora_rank) if isinstance(model.get_submodule(n), (nn.Linear, Conv1D)) and not any(k in n.split(".") for k in keep)]


def biases_cast_on_first_forward(model: nn.Module) -> list[torch.Tensor]:
    """The biases of the 4-bit layers of a model prepared for QLoRA: bitsandbytes'
    ``Linear4bit.forward`` casts its bias in place to the dtype it computes in
    (``bias.data = bias.data.to(x.dtype)``, bitsandbytes/nn/modules.py) on the layer's first
    forward where the two differ, so a real step 1 leaves the cast biases to step 2."""
    bnb = _bnb()
    return [m.bias for m in model.modules() if isinstance(m, bnb.nn.Linear4bit) and m.bias is not None]


def _inject_qlora(model: nn.Module, setup: TrainSetup) -> nn.Module:
    """Swap the adapted linear layers for bitsandbytes ``Linear4bit`` (what
    ``from_pretrained(quantization_config=...)`` does), run peft's
    ``prepare_model_for_kbit_training`` (non-quantized weights to fp32), then
    inject LoRA; peft picks its own 4-bit LoRA layer.  The weights themselves
    are quantized by :func:`quantize_4bit` (under fake tensors or real ones)."""
    bnb = _bnb()
    from peft import prepare_model_for_kbit_training

    targets = _adapted(model, setup)
    from transformers.pytorch_utils import Conv1D

    quantize = qlora_quantized(model, setup)
    if not quantize:
        raise PlanOptionError(f"{type(model).__name__} has no linear layer for QLoRA to quantize")
    cast_model(model, setup.frozen_dtype)
    for name in quantize:
        old = cast("nn.Linear | Conv1D", model.get_submodule(name))  # the filter above kept only these
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        n_in, n_out = tuple(old.weight.shape) if isinstance(old, Conv1D) else (old.in_features, old.out_features)
        new = bnb.nn.Linear4bit(n_in, n_out, old.bias is not None, compute_dtype=setup.compute_dtype, compress_statistics=True, quant_type="nf4", device=old.weight.device)
        if old.bias is not None:
            new.bias = nn.Parameter(old.bias.data, requires_grad=False)
        setattr(parent, child, new)
    model.is_loaded_in_4bit = True  # type: ignore[assignment]  # a plain flag; nn.Module's stub types attributes as Tensor | Module. What transformers sets; peft reads it to pick its 4-bit LoRA layer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=setup.grad_checkpointing, gradient_checkpointing_kwargs=checkpoint_kwargs(setup))
    return _get_peft_model(model, setup, targets)


COPY_SAME_SHAPES = True  # False: every layer quantized by bitsandbytes (what the tests compare with)


def _copied(packed: torch.Tensor, state):
    """Another layer's quantization, on fake tensors, from one of the same shape: each tensor
    cloned (its own storage, as bitsandbytes makes for every layer: none is shared between
    two calls, none is a constant) into a copy of the state.  Only shapes matter on fake
    tensors, and bitsandbytes' code makes the same shapes for the same weight shape; the clones
    take a fifth of the time of quantizing again (tests/plan/test_qlora_quantized.py)."""
    import copy

    out = copy.copy(state)
    out.absmax, out.code = state.absmax.clone(), state.code.clone()
    if isinstance(state.offset, torch.Tensor):
        out.offset = state.offset.clone()
    if state.state2 is not None:
        out.state2 = copy.copy(state.state2)
        out.state2.absmax, out.state2.code = state.state2.absmax.clone(), state.state2.code.clone()
    return packed.clone(), out


def quantize_4bit(model: nn.Module, seed: int = 0) -> list[torch.Tensor]:
    """Quantize every ``Linear4bit`` weight with bitsandbytes' own NF4 code.

    Call under FakeTensorMode (simulation: only shapes) or on a real model
    (measurement: random weights).  Returns the tensors the quantized weights
    consist of (packed 4-bit data and the quantization statistics).
    """
    bnb = _bnb()
    import bitsandbytes.functional as bnbf
    from torch._subclasses.fake_tensor import FakeTensor

    held: list[torch.Tensor] = []
    first: dict[tuple, tuple] = {}  # (out, in, dtype) -> the first fake quantization of that shape
    for mod in model.modules():
        if not isinstance(mod, bnb.nn.Linear4bit) or mod.weight.dtype == torch.uint8:
            continue
        shape = (mod.out_features, mod.in_features, mod.compute_dtype or torch.float32)
        if shape in first and COPY_SAME_SHAPES:
            packed, state = _copied(*first[shape])
        else:
            w = torch.randn(*shape[:2], dtype=shape[2])
            packed, state = bnbf.quantize_4bit(w, blocksize=QLORA_BLOCKSIZE, compress_statistics=True, quant_type="nf4")
            del w
            if isinstance(packed, FakeTensor):
                first[shape] = (packed, state)
        weight = nn.Parameter(packed, requires_grad=False)
        weight.quant_state = state  # type: ignore[attr-defined]  # bitsandbytes' Params4bit attribute, set on a plain Parameter as bnb reads it
        mod.weight = weight
        held.append(packed)
        held.extend(t for t in (state.absmax, state.code, state.offset) if isinstance(t, torch.Tensor))
        if state.state2 is not None:
            held.extend((state.state2.absmax, state.state2.code))
    return held
