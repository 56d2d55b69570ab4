"""Images and video: size, channels, frames, and the patch layouts vision towers take."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ..introspect import SUBCONFIGS, as_int, config_find, config_get
from .context import _Ctx, _first_module
from .defaults import DEFAULT_IMAGE_SIZE, DEFAULT_VIDEO_FRAMES
from .types import Alternative, TensorSpec


def _channels(vc: Any) -> int:
    return as_int(config_get(vc, "num_channels", "in_channels", "in_chans", "input_channels", "channels"), 3) or 3


def _hw(v) -> tuple[int, int]:
    if isinstance(v, dict):
        v = (v.get("height") or v.get("shortest_edge"), v.get("width") or v.get("shortest_edge"))
    if isinstance(v, (list, tuple)):
        return (int(v[0]), int(v[-1])) if len(v) >= 2 else (int(v[0]), int(v[0]))
    return int(v), int(v)


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
    size = config_get(vc, "image_size", "img_size", "input_size", "crop_size")
    if size is None:
        size = config_find(ctx.cfg, "image_size", "img_size", "input_size", "max_img_size")
    try:
        hw = _hw(size) if size is not None else None
    except (TypeError, ValueError):
        hw = None
    if hw is None or min(hw) <= 0:
        hw, why = (DEFAULT_IMAGE_SIZE, DEFAULT_IMAGE_SIZE), "neurarch's default (the config gives no image_size)"
    else:
        why = "from the config"
    p = as_int(config_get(vc, "patch_size") or config_get(ctx.cfg, "patch_size"))
    # Windowed backbones cut the patch grid into num_windows x num_windows windows (RF-DETR).
    windows = as_int(config_find(ctx.cfg, "num_windows", subs=(*SUBCONFIGS, "backbone_config")))
    if p and windows and windows > 1 and (hw[0] % (p * windows) or hw[1] % (p * windows)):
        unit = p * windows
        hw = (-(-hw[0] // unit) * unit, -(-hw[1] // unit) * unit)
        why = f"rounded up to whole windows ({windows} windows of {p} px patches a side)"
    if p and p > 1:
        ratios = config_find(ctx.cfg, "scaled_images_ratios")
        low = min(ratios) if isinstance(ratios, (list, tuple)) and ratios and min(ratios) > 0 else 1
        side = int(math.ceil(p / low))
        if min(hw) < side:
            hw, why = (max(hw[0], side), max(hw[1], side)), f"at least one {p} px patch at scale {low:g}"
    ctx.how.append(f"image {hw[0]}x{hw[1]} {why}" if why.startswith("from") else f"image {hw[0]}x{hw[1]}: {why}")
    ctx.image = hw
    return hw


def _num_frames(ctx: _Ctx) -> int:
    n = as_int(config_find(ctx.cfg, "num_frames", "frames_per_clip", "video_frames"))
    if n:
        ctx.how.append(f"{n} video frames from the config")
        return n
    ctx.how.append(f"{DEFAULT_VIDEO_FRAMES} video frames: neurarch's default")
    return DEFAULT_VIDEO_FRAMES


def _patch_grid(ctx: _Ctx) -> dict | None:
    """Qwen-style flattened patches: ``(patches, C*T*p*p)`` plus a ``[t, h, w]`` grid per image."""
    vc = ctx.vision_cfg
    p = as_int(config_get(vc, "patch_size", "spatial_patch_size"))
    if not p:
        return None
    t = as_int(config_get(vc, "temporal_patch_size", "patch_temporal"), 1) or 1
    merge = as_int(config_get(vc, "spatial_merge_size", "merge_size", "downsample_ratio"), 1) or 1
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
                    Alternative(
                        [blocks, TensorSpec(grid_name, (ctx.b, 3), torch.long, data=tokens)],
                        f"one {p * m}x{p * m}x{c} pixel block per merged token, grid {gh // m}x{gw // m} in tokens (flat patches failed)",
                    )
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
    p = as_int(config_get(vc, "patch_size"), 16) or 16
    c = _channels(vc)
    n = as_int(config_get(vc, "num_patches", "max_num_patches"))
    if n:
        gh = gw = max(int(math.isqrt(n)), 1)
    else:
        h, w = _image_size(ctx)
        gh, gw = max(h // p, 1), max(w // p, 1)
    # Grid sides a multiple of the pooling/merge window, when the tower pools patches.
    unit = as_int(config_get(vc, "pooling_kernel_size", "spatial_merge_size", "merge_size"), 1) or 1
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
    if config_find(ctx.cfg, "num_frames", "frames_per_clip", "tubelet_size") is not None:
        return True
    return _first_module(ctx.model, (nn.Conv3d,)) is not None
