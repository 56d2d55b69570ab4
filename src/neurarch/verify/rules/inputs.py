"""The input against the model's first layer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from torch import nn
else:  # imported on first use: listing the rules must not import torch
    from ..._lazy import nn

from ..context import CheckContext
from ..registry import Hit, rule


def _first_conv(ctx: CheckContext) -> Optional[tuple[str, nn.Module]]:
    """The first 2-D convolution the forward pass ran: the one that reads the image."""
    for node in ctx.nodes:
        mod = ctx.module(node.name)
        if mod is None:
            continue
        for sub_name, m in mod.named_modules():
            if isinstance(m, nn.Conv2d):
                return (f"{node.name}.{sub_name}" if sub_name else node.name), m
    return None


def dropped_pixels(size: int, kernel: int, stride: int, padding: int, dilation: int = 1) -> int:
    """Pixels at the far edge that no window of the convolution reads.

    Windows start at 0, s, 2s ... in the padded input (``size + 2p``); the last
    one ends at ``(out - 1) * s + d * (k - 1)``; the image itself ends at
    ``p + size - 1``.
    """
    span = dilation * (kernel - 1)
    out = (size + 2 * padding - span - 1) // stride + 1
    if out <= 0:
        return size
    last_read = (out - 1) * stride + span
    return max(0, padding + size - 1 - last_read)


def _image_applies(ctx: CheckContext):
    if not ctx.report.input or len(ctx.report.input.shape) != 4:
        return "the input is not an image batch (N, C, H, W)"
    return None if _first_conv(ctx) else "the model has no 2-D convolution"


@rule(
    "image-size-drops-pixels",
    severity="warn",
    summary="Image size that the first convolution (patch embedding, stem) does not cover: edge pixels are never read.",
    applies=_image_applies,
)
def image_size_drops_pixels(ctx: CheckContext):
    found, inp = _first_conv(ctx), ctx.report.input
    assert found is not None and inp is not None, "applies() checked both"
    name, module = found
    conv: Any = module  # an nn.Conv2d: kernel_size, stride, padding, dilation are tuples
    if isinstance(conv.padding, str):
        return  # 'same' / 'valid' padding: PyTorch sizes it to the input
    h, w = inp.shape[-2:]
    lost = [dropped_pixels(size, conv.kernel_size[i], conv.stride[i], conv.padding[i], conv.dilation[i]) for i, size in enumerate((h, w))]
    if not any(lost):
        return
    kept = (h - lost[0]) * (w - lost[1])
    frac = 1 - kept / (h * w)
    k, s = conv.kernel_size, conv.stride
    multiple = s[0] if s[0] == s[1] else None
    fix = (
        f"Resize or crop images to a multiple of {multiple} ({(h // multiple) * multiple} or {(h // multiple + 1) * multiple} pixels)."
        if multiple and conv.padding == (0, 0)
        else f"Use an image size that the stem's kernel {k} / stride {s} / padding {conv.padding} covers exactly."
    )
    yield Hit(
        node=name,
        message=(
            f"The first convolution `{name}` (kernel {k[0]}x{k[1]}, stride {s[0]}x{s[1]}, padding {conv.padding[0]}) reads a "
            f"{h}x{w} image, but its windows stop short: the last {lost[0]} row(s) and {lost[1]} column(s) are never read "
            f"({frac:.1%} of the pixels). The model silently sees a cropped image."
        ),
        fix=fix,
    )
