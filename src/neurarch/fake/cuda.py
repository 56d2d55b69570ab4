"""Follow CUDA's kernel choices while simulating on fake CPU tensors.

A CPU-only PyTorch cannot make fake CUDA tensors (the device guard aborts), so
the simulation runs on fake *CPU* tensors.  Where CPU and CUDA kernels keep
different tensors alive, :class:`CudaKernels` (a TorchFunctionMode, so above
autograd: what it calls is what autograd saves) routes the call to the op
CUDA would run.  Shapes and saved tensors then come from that op's own meta
kernel and derivative formula in PyTorch, not from a formula of ours.

* ``F.dropout`` in training: CUDA runs ``aten.native_dropout`` (aten/src/ATen/
  native/Dropout.cpp, ``is_fused_kernel_acceptable``: CUDA/XPU only), whose
  backward keeps a *bool* mask; CPU runs ``input * (bernoulli/(1-p))`` and
  keeps a mask in the input's dtype.
* ``F.scaled_dot_product_attention``: with dropout, CPU falls back to the math
  kernel, which keeps the whole attention-probability matrix (and a dropout
  mask); CUDA picks a fused kernel that keeps the output and a log-sum-exp.
  We call ``aten._scaled_dot_product_flash_attention`` when CUDA's flash kernel
  applies (fp16/bf16, no explicit mask, one head size for q, k and v:
  sdp_utils.cpp ``use_flash_attention``),
  else ``aten._scaled_dot_product_efficient_attention`` (fp32 or a mask).

* autocast: CUDA's autocast runs more ops in fp32 than CPU's (ATen/autocast_mode.h,
  ``AT_FORALL_FP32`` and ``AT_FORALL_FP32_SET_OPT_DTYPE``, the CUDA lists;
  CPU has its own, shorter ones in autocast_mode.cpp).  The ones models call
  from Python are listed in :data:`CUDA_FP32` / :data:`CUDA_FP32_OUT`; under
  an active autocast we cast their low-precision inputs to fp32 (what
  ``cached_cast(at::kFloat, ...)`` does) or ask for an fp32 result.  Ops
  reached only inside C++ composites are not seen here.

With ``device="cpu"`` none of this is active: the CPU kernels are traced as
they are, which is what the CPU measurement checks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

aten = torch.ops.aten
_DROPOUTS = {F.dropout, torch.dropout, getattr(torch._C._VariableFunctions, "dropout", None)}
_SDPA = {F.scaled_dot_product_attention}


def _dropout(args, kwargs):
    x = args[0] if args else kwargs["input"]
    p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
    train = args[2] if len(args) > 2 else kwargs.get("training", kwargs.get("train", True))
    inplace = args[3] if len(args) > 3 else kwargs.get("inplace", False)
    if not train or p == 0 or inplace:
        return None
    return torch.native_dropout(x, p, True)[0]


def _sdpa(args, kwargs, flash_always: bool = False):
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    a = dict(zip(names, args))
    a.update(kwargs)
    q, k, v = a["query"], a["key"], a["value"]
    mask = a.get("attn_mask")
    p = float(a.get("dropout_p", 0.0) or 0.0)
    causal = bool(a.get("is_causal", False))
    scale = a.get("scale")
    if q.dim() != 4:
        return None
    # Flash: half precision, no mask, one head size for q, k and v up to 256
    # (sdp_utils.cpp check_head_dim_size_flash; DeepSeek's MLA has v narrower than q/k).
    flash = q.dtype in (torch.float16, torch.bfloat16) and (mask is None or flash_always) and q.size(-1) <= 256 and q.size(-1) == k.size(-1) == v.size(-1)
    if k.size(-3) != q.size(-3):  # grouped-query: CUDA's math/efficient paths repeat K/V
        if not a.get("enable_gqa", False):
            return None
        rep = q.size(-3) // k.size(-3)
        if not flash:
            k = k.repeat_interleave(rep, dim=-3)
            v = v.repeat_interleave(rep, dim=-3)
    if flash:
        return aten._scaled_dot_product_flash_attention(q, k, v, p, causal, False, scale=scale)[0]
    if k.size(-3) != q.size(-3):
        return None
    if mask is not None and mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=q.dtype).masked_fill(mask.logical_not(), float("-inf"))
    need_grad = q.requires_grad or k.requires_grad or v.requires_grad
    return aten._scaled_dot_product_efficient_attention(q, k, v, mask, need_grad, p, causal, scale=scale)[0]


# From AT_FORALL_FP32 (torch 2.13 ATen/autocast_mode.h): ops CUDA autocast runs in fp32.
CUDA_FP32 = {
    "acos",
    "asin",
    "cosh",
    "erfinv",
    "exp",
    "expm1",
    "log",
    "log10",
    "log2",
    "log1p",
    "reciprocal",
    "rsqrt",
    "sinh",
    "tan",
    "pow",
    "softplus",
    "layer_norm",
    "rms_norm",
    "group_norm",
    "cosine_similarity",
    "poisson_nll_loss",
    "cosine_embedding_loss",
    "nll_loss",
    "hinge_embedding_loss",
    "kl_div",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "mse_loss",
    "margin_ranking_loss",
    "multilabel_margin_loss",
    "soft_margin_loss",
    "triplet_margin_loss",
    "multi_margin_loss",
    "binary_cross_entropy_with_logits",
    "dist",
    "pdist",
    "cdist",
    "renorm",
    "logsumexp",
    "interpolate",
}
# From AT_FORALL_FP32_SET_OPT_DTYPE: run with dtype=float32 when the input is low precision.
CUDA_FP32_OUT = {"prod", "softmax", "log_softmax", "cumprod", "cumsum", "sum"}
_LOW = (torch.float16, torch.bfloat16)


def _autocast_on() -> bool:
    try:
        return torch.is_autocast_enabled("cpu")
    except TypeError:  # torch < 2.4
        return torch.is_autocast_cpu_enabled()


def _to_fp32(x):
    if isinstance(x, torch.Tensor) and x.dtype in _LOW:
        return x.float()
    if isinstance(x, (list, tuple)):
        return type(x)(_to_fp32(v) for v in x)
    return x


def _cuda_autocast(func, args, kwargs):
    name = getattr(func, "__name__", "")
    if name in CUDA_FP32:
        if not any(isinstance(a, torch.Tensor) and a.dtype in _LOW for a in args):
            return None
        with torch.autocast("cpu", enabled=False):
            return func(*[_to_fp32(a) for a in args], **{k: _to_fp32(v) for k, v in kwargs.items()})
    if name in CUDA_FP32_OUT:
        x = args[0] if args else None
        if not isinstance(x, torch.Tensor) or x.dtype not in _LOW or kwargs.get("dtype") is not None:
            return None
        if name in ("softmax", "log_softmax") and len(args) > 3:
            return None  # dtype given positionally
        return func(*args, **{**kwargs, "dtype": torch.float32})
    return None


class CudaKernels(TorchFunctionMode):
    """Route dropout and attention to the kernels CUDA would run (see module doc).

    ``flash_always``: the model runs flash-attn (``attn_implementation=
    "flash_attention_2"``), simulated through transformers' SDPA path: every
    attention call takes the flash kernel, whose saved tensors (output and
    log-sum-exp) are those of flash-attn 2's own backward.  A padding mask does
    not make it fall back (flash-attn unpads instead; our batches hold no
    padding, so the unpadded tensors are the same size).
    """

    def __init__(self, flash_always: bool = False):
        super().__init__()
        self.flash_always = flash_always

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _DROPOUTS:
            out = _dropout(args, kwargs)
            if out is not None:
                return out
        elif func in _SDPA:
            out = _sdpa(args, kwargs, self.flash_always)
            if out is not None:
                return out
        elif _autocast_on():
            out = _cuda_autocast(func, args, kwargs)
            if out is not None:
                return out
        return func(*args, **kwargs)
