"""The planner: which inputs a model's forward needs, in order (main input, text, media, extras, decoder)."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from .. import limits
from ..errors import InputError
from ..introspect import as_int, config_find, config_get, forward_params, max_positions, required_params, special_ids, sub_config, vocab_size
from ..options import InputOptions
from .audio import _AUDIO_FEATURES, _AUDIO_VALUES, _audio_features, _audio_values
from .context import _Ctx, _tagged
from .defaults import DEFAULT_ENCODER_STATES, DEFAULT_QUERY_TOKENS, DEFAULT_SEQ_LEN_ENCODER, DEFAULT_VISUAL_REGIONS
from .extras import _bbox, _time_series, _vectors
from .text import _text_seq, _token_runs, _tokens
from .types import Alternative, InputPlan, TensorSpec
from .vision import _patch_grid, _pixels
from .work import asked, check_plan

_PIXELS = ("pixel_values", "pixel_values_videos", "image", "images", "flattened_patches")


def _main_name(model: nn.Module, params: dict[str, inspect.Parameter]) -> str:
    """The forward argument the model is fed by: ``main_input_name`` when the forward takes it."""
    main = getattr(model, "main_input_name", "input_ids")
    if isinstance(main, (list, tuple)):
        main = main[0] if main else "input_ids"
    if main in params:
        return main
    required = required_params(params)
    for cand in [*required, "input_ids", "pixel_values", "input_values", "input_features", "past_values"]:
        if cand in params:
            return cand
    return next(iter(params), "x")


def plan_inputs(model: nn.Module, cfg: Any, opts: InputOptions, default_shape: tuple[int, ...] | None = None) -> InputPlan:
    """Decide the forward inputs for a model (see the module docstring for the rules)."""
    b = opts.batch
    how: list[str] = [f"batch {b}" + (" from --batch" if b != 1 else "")]
    params = forward_params(model)

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
    for name in required_params(params):  # whatever else the forward requires, by name
        if name not in ctx.specs:
            ctx.add(_by_name(ctx, name, ctx.specs))

    # A training step keeps no key/value cache (and some hybrid models cannot build one by default).
    kwargs = {"use_cache": False} if "use_cache" in params else {}
    if kwargs:
        how.append("use_cache=False (a training step keeps no cache)")

    tensors = list(ctx.specs.values())
    for t in tensors:
        if t.numel > limits.MAX_INPUT_ELEMENTS:
            by = " and ".join(asked(opts)) or "the model's default input"
            raise InputError(
                f"{by}: input {t.name} {t.shape} is beyond neurarch's limit of {limits.MAX_INPUT_ELEMENTS:,} elements", field=(asked(opts) or ["--batch"])[0].split()[0][2:].replace("-", "_")
            )
    if main not in ctx.specs and tensors:
        main = tensors[0].name
    seq = ctx.seq if main not in _PIXELS else None
    plan = InputPlan(tensors, main=main, batch=b, seq_len=seq, image_size=ctx.image, how=how, alternatives=ctx.alternatives, kwargs=kwargs)
    check_plan(plan, cfg, opts)  # absurd activations are refused here, before any trace
    return plan


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
    if main == "input_ids" or "input_ids" in required_params(p) or sub_config(cfg, "text_config") is not None or _token_runs(ctx, "image"):
        ids = ctx.specs["input_ids"] = _tokens(ctx, "input_ids")
        # Audio-token models read a text stream and one stream per codebook at each step (Kyutai):
        # (batch, steps, 1 + codebooks), ids within the codebooks' vocabulary.
        k, cb_vocab = as_int(config_get(cfg, "num_codebooks")), as_int(config_get(cfg, "codebook_vocab_size"))
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
        if runs or sub_config(cfg, "vision_config", "backbone_config") is not None or "pixel_values" in required_params(p) or config_get(cfg, "image_size") is not None:
            ctx.add(_tagged(_pixels(ctx, "pixel_values"), "image"))
            ids.runs.extend(runs)
    if sub_config(cfg, "audio_config", "speech_config") is not None:  # CLAP-like towers, audio-language models
        audio = next((n for n in (*_AUDIO_FEATURES, *_AUDIO_VALUES) if n in p), None)
        if audio is not None and audio not in specs:
            seq = ctx.seq
            ctx.add(_tagged(_audio_features(ctx, audio) if audio in _AUDIO_FEATURES else _audio_values(ctx, audio), "audio"))
            frames, ctx.seq = ctx.seq, seq  # the text keeps its own length
            ids.runs.extend(_token_runs(ctx, "audio"))
            # Streaming models add one audio embedding to each text token (Voxtral-Realtime:
            # audio_length_per_tok feature frames a token): the text as long as the audio.
            per_tok = as_int(config_get(cfg, "audio_length_per_tok"))
            if per_tok and frames and frames // per_tok >= 1:
                n = frames // per_tok
                ctx.alternatives.append(
                    Alternative(
                        [TensorSpec("input_ids", (ctx.b, n), torch.long, ids.high, avoid=ids.avoid, text=True)],
                        f"text of {n} tokens: one per {per_tok} audio frames (the config's audio_length_per_tok)",
                    )
                )
    if "pixel_values_videos" in required_params(p) and "pixel_values_videos" not in specs:
        ctx.add(_tagged(_pixels(ctx, "pixel_values_videos"), "video"))
        ids.runs.extend(_token_runs(ctx, "video"))
    if ids.runs and "mm_token_type_ids" in p:  # which modality each token is
        specs["mm_token_type_ids"] = TensorSpec("mm_token_type_ids", ids.shape, torch.long, runs=ids.runs, text=True, run_codes=True)


def _add_extras(ctx: _Ctx) -> None:
    """Inputs some text models need beside their tokens: language ids, layout boxes."""
    p, cfg, specs, b = ctx.params, ctx.cfg, ctx.specs, ctx.b
    # Language adapters (X-MOD): the first of the config's languages.
    if "lang_ids" in p and config_get(cfg, "languages"):
        specs["lang_ids"] = TensorSpec("lang_ids", (b,), torch.long, fill=0)
        ctx.how.append(f"language {list(cfg.languages)[0]!r} (lang_ids 0)")
    # Kosmos-2: which text positions the image's latent queries take.
    ids = specs.get("input_ids")
    if "image_embeds_position_mask" in p and ids is not None and "pixel_values" in specs:
        n = as_int(config_find(cfg, "latent_query_num", "image_seq_length", "num_image_tokens"))
        if n and n + 1 < ids.shape[1]:
            row = [0] + [1] * n + [0] * (ids.shape[1] - n - 1)
            specs["image_embeds_position_mask"] = TensorSpec("image_embeds_position_mask", ids.shape, torch.long, data=[row] * b)
            ctx.how.append(f"{n} image positions in the text (image_embeds_position_mask, the config's latent queries)")
    # NaViT-style towers: each image's patch grid [h, w] (MiniCPM-V's target_sizes).  A tower
    # alone only: the full model works the grid out itself (and would then want more inputs).
    pix = specs.get("pixel_values")
    patch = as_int(config_get(ctx.vision_cfg, "patch_size"))
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
    enc = as_int(config_get(cfg, "encoder_hidden_size"))
    if "encoder_hidden_states" in p and "encoder_hidden_states" not in specs and enc:
        specs["encoder_hidden_states"] = TensorSpec("encoder_hidden_states", (b, DEFAULT_ENCODER_STATES, enc))
        ctx.how.append(f"encoder_hidden_states: {DEFAULT_ENCODER_STATES} states (neurarch's default: a 224 px image in 14 px patches + 1) of the config's encoder_hidden_size {enc}")
    # Region features of a text model (LXMERT: visual_feats with the config's visual_feat_dim, visual_pos).
    if ids is not None:
        for name in p:
            dim = as_int(config_get(cfg, f"{name}_dim", f"{name[:-1]}_dim" if name.endswith("s") else f"{name}_dim"))
            if name.startswith("visual_") and name not in specs and dim:
                specs[name] = TensorSpec(name, (b, DEFAULT_VISUAL_REGIONS, dim))
                ctx.how.append(f"{name}: {DEFAULT_VISUAL_REGIONS} regions (neurarch's default) of {dim} values (the config's width)")
    # Layout models: a box per token (they embed 2-D positions).
    if "bbox" in p and "input_ids" in specs and ("bbox" in required_params(p) or config_find(cfg, "max_2d_position_embeddings", "max_2d_positions", "dim_bbox") is not None):
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
    found: list[tuple[str, nn.Linear | nn.Embedding]] = []
    for arg, param in ctx.params.items():
        if "Tensor" not in str(param.annotation):  # return_dict and other flags
            continue
        for child_name, child in ctx.model.named_children():
            stem = child_name[len("embed_") :] if child_name.startswith("embed_") else ""
            if len(stem) >= 3 and arg.startswith(stem) and isinstance(child, (nn.Linear, nn.Embedding)):
                found.append((arg, child))
                break
    if len(found) < 2:
        return
    cap = max_positions(ctx.cfg) or DEFAULT_SEQ_LEN_ENCODER
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
    if "decoder_input_ids" not in p or not (getattr(cfg, "is_encoder_decoder", False) or "decoder_input_ids" in required_params(p)):
        return
    dec_cfg = sub_config(cfg, "decoder", "decoder_config", "text_config") or cfg
    asked = ctx.opts.decoder_seq_len
    dec_seq = asked or (_text_seq(ctx, dec_cfg, decoder=True) if main != "input_ids" else (ctx.seq or _text_seq(ctx)))
    cap = max_positions(dec_cfg) or as_int(config_get(cfg, "max_target_positions"))
    if cap is not None:
        dec_seq = min(dec_seq, cap)
    vocab, avoid = vocab_size(dec_cfg), special_ids(cfg)
    ctx.specs["decoder_input_ids"] = TensorSpec("decoder_input_ids", (b, dec_seq), torch.long, vocab, avoid=avoid)
    ctx.how.append(f"decoder_input_ids of {dec_seq} tokens" + (" (--decoder-seq-len)" if asked else ""))
    codebooks = as_int(config_get(dec_cfg, "num_channels", "num_codebooks"))
    if codebooks and codebooks > 1:  # audio decoders: one token per codebook per step
        per_codebook = TensorSpec("decoder_input_ids", (b, dec_seq, codebooks), torch.long, vocab, avoid=avoid)
        ctx.alternatives.append(Alternative([per_codebook], f"decoder tokens for {codebooks} codebooks per step"))


def _by_name(ctx: _Ctx, name: str, specs: dict[str, TensorSpec]) -> list[TensorSpec]:
    """A required forward argument the main-input rules did not cover, synthesised from its name."""
    seq = ctx.seq or _text_seq(ctx)
    if name in _PIXELS or name.endswith("pixel_values"):
        return (
            _pixels(ctx, "pixel_values_videos" if "video" in name else "pixel_values") if name in ("pixel_values", "pixel_values_videos") else [TensorSpec(name, _pixels(ctx, "pixel_values")[0].shape)]
        )
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
        sub = sub_config(ctx.cfg, "qformer_config") if "qformer" in name else None
        return [TensorSpec(name, (ctx.b, n), torch.long, vocab_size(sub or ctx.text_cfg), avoid=special_ids(ctx.cfg))]
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
        ids = specs.get(name.replace("attention_mask", "input_ids")) or specs.get("input_ids")
        shape = ids.shape[:2] if ids is not None else (ctx.b, seq)
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
    if name.endswith("_inputs") and as_int(config_get(ctx.cfg, name[: -len("inputs")] + "seq_len")):
        # Tokenised task text of a fixed length (OneFormer's task_inputs, task_seq_len).
        n = as_int(config_get(ctx.cfg, name[: -len("inputs")] + "seq_len")) or 0  # set: the condition above
        vocab = as_int(config_find(ctx.cfg, "text_encoder_vocab_size", "vocab_size"), 1000) or 1000
        ctx.how.append(f"{name}: {n} token ids (the config's {name[: -len('inputs')]}seq_len)")
        return [TensorSpec(name, (ctx.b, n), torch.long, vocab, avoid=special_ids(ctx.cfg))]
    if name.endswith(("embeds", "hidden_states", "latents", "inputs", "states")):
        return _vectors(ctx, name, seq)
    return []
