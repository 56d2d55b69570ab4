"""``neurarch-trace MODEL ...``: the report of one or more models (the default command).

    neurarch-trace microsoft/resnet-50
    neurarch-trace ./my-model/ --plan --format json
    neurarch-trace a/config.json b/config.json --format jsonl

The flags become one :class:`~neurarch.options.Options` (checked as it is
made, before torch is imported), then :func:`neurarch.pipeline.analyze` and a
renderer.  Other commands that take model flags (``sweep``, ``diff``) reuse
:func:`add_model_options` and :func:`options_from_args`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from .. import __version__
from ..errors import NeurarchError
from ..options import ADAPTER_DTYPES, ATTENTIONS, DEFAULT_HEADROOM, DEFAULT_LORA_RANK, FORMATS, MODES, TASKS
from .common import EXIT_USAGE, write


def add_model_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("input shape (the report always prints what was used)")
    g.add_argument("--batch", type=int, help="batch size: of the trace (default 1) and of a priced run (default 32, or the largest that fits)")
    g.add_argument("--seq-len", type=int, help="tokens per sample for text models (default 2048 decoders / 512 encoders, capped by the model's positions)")
    g.add_argument("--image-size", type=int, help="image side in pixels (default: the config's image_size, else 224)")
    g.add_argument("--input-shape", help="per-sample shape for plain modules, e.g. 3,224,224 or 64")
    g.add_argument("--decoder-seq-len", type=int, help="encoder-decoders: the decoder's tokens, i.e. the labels' length (default: as many as the encoder's)")
    g = p.add_argument_group("plan: what it costs to run (--cost; --plan adds it)")
    g.add_argument("--cost", action="store_true", help="price a training run on every card (roofline estimate)")
    g.add_argument("--plan", action="store_true", help="the full plan: GPU memory per mode, what fits on which card, sharded plans, and the cost")
    g.add_argument("--modes", default=",".join(MODES), help=f"memory modes to simulate (default: {','.join(MODES)})")
    g.add_argument("--optimizer", default="adamw", help="adamw (default: torch's foreach AdamW) | adamw-fused (the HF Trainer's adamw_torch_fused) | adamw-8bit | sgd | adafactor")
    g.add_argument("--lora-rank", type=int, default=DEFAULT_LORA_RANK, help=f"LoRA rank (default {DEFAULT_LORA_RANK})")
    g.add_argument("--lora-targets", metavar="NAMES", help="peft target_modules: module names such as q_proj,v_proj, or all-linear (default: every linear layer but the head)")
    g.add_argument("--lora-dropout", type=float, default=0.0, help="LoRA dropout (peft's default 0.0; recipes use 0.05-0.1: it keeps a dropped copy of each adapted input)")
    g.add_argument("--adapter-dtype", choices=ADAPTER_DTYPES, help="LoRA adapter weights: fp32 (peft's default over a bf16 base) or bf16 (pure-bf16 training)")
    g.add_argument("--attn-implementation", choices=ATTENTIONS, help="attention as transformers names it (default: what transformers picks on a CUDA card, usually sdpa); flash_attention_2 follows CUDA's flash kernel")
    g.add_argument("--task", choices=TASKS, help="the head you fine-tune (default: the config's architectures[0]); the checkpoint comparison keeps the published head")
    g.add_argument("--num-labels", type=int, default=2, help="classes for --task seq-cls / token-cls (default 2)")
    g.add_argument("--grad-checkpointing", action="store_true", help="recompute activations in backward (transformers' gradient_checkpointing_enable, non-reentrant)")
    g.add_argument("--grad-accumulation", type=int, default=1, metavar="N", help="micro-batches per optimizer step (the Trainer's gradient_accumulation_steps; --batch is the micro-batch): later ones run with the gradients alive")
    g.add_argument("--headroom", type=float, default=DEFAULT_HEADROOM, help=f"a card fits when peak x headroom <= its memory (default {DEFAULT_HEADROOM})")
    g.add_argument("--context-len", type=int, help="inference: KV cache length in tokens (default: the input's)")
    g.add_argument("--epochs", type=int, default=10, help="epochs of the run (default 10)")
    g.add_argument("--samples", type=int, help="samples per epoch (default 50,000)")
    g.add_argument("--tokens", type=int, help="tokens per epoch, for language models (instead of --samples)")
    g.add_argument("--precision", default="bf16-mixed", help="fp32 | bf16-mixed (default) | fp16-mixed | bf16")
    g.add_argument("--card", action="append", default=[], metavar="CARD", help="headline card (default A10G); NAME:GB adds a custom card; repeatable")
    g.add_argument("--price", action="append", default=[], metavar="CARD=USD", help="override a card's on-demand price per hour; repeatable")
    g = p.add_argument_group("verifier")
    g.add_argument("--from-scratch", action="store_true", help="you train from scratch (initialisation checks apply); default: fine-tuning")
    g.add_argument("--disable", action="append", default=[], metavar="RULE", help="turn a verifier rule off (repeatable or comma-separated; see `neurarch-trace checks`)")
    g.add_argument("--no-verify", action="store_true", help="skip the verifier")
    g = p.add_argument_group("source")
    g.add_argument("--revision", help="hub revision (branch, tag or commit); skips the bundled catalog")
    g.add_argument("--offline", action="store_true", help="never contact the Hub: bundled catalog and the local HF cache only (as HF_HUB_OFFLINE=1)")
    g.add_argument("--trust-remote-code", action="store_true", help="allow configs that need code from the model repo (auto_map); off by default")
    g = p.add_argument_group("run")
    g.add_argument("--no-backward", action="store_true", help="trace the forward pass only")
    g.add_argument("--timeout", type=float, help="give up on a model after this many seconds (default 300; 1200 with --plan)")
    g.add_argument("--debug", action="store_true", help="show tracebacks")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="neurarch-trace",
        description="Rebuild a model from its config on fake tensors (no weights read) and report its layers and exact parameter counts.",
        epilog="Other commands: `neurarch-trace catalog` lists the bundled offline catalog; `neurarch-trace checks` lists the verifier's rules; `neurarch-trace measure MODEL` runs real training steps and compares the measured peak with the estimate.",
    )
    p.add_argument("models", nargs="+", metavar="MODEL", help="hub id, catalog id, config.json, model folder, timm:NAME, torchvision:NAME or python:FILE.py:Factory")
    p.add_argument("--format", "-f", choices=FORMATS, default="text")
    p.add_argument("--depth", type=int, help="layer-table granularity: modules at this depth (default: compute layers, attention/MLP blocks as one row)")
    p.add_argument("--max-rows", type=int, default=80, help="rows of the layer table in text/markdown (default 80, 0 = all); JSON/HTML always have all")
    p.add_argument("--share", nargs="?", const="", metavar="PATH", help="also write the HTML page to PATH (default: a temp file) and print its path")
    p.add_argument("--output", "-o", metavar="PATH", help="write the output to a file instead of stdout")
    p.add_argument("--version", action="version", version=f"neurarch {__version__}")
    add_model_options(p)
    return p


def recipe_args(args) -> dict:
    """The recipe flags the plan and measure share, as keyword arguments."""
    targets = args.lora_targets
    return dict(
        attn_implementation=args.attn_implementation,
        lora_targets=tuple(t.strip() for t in targets.split(",") if t.strip()) if targets is not None else None,
        lora_dropout=args.lora_dropout,
        adapter_dtype=args.adapter_dtype,
        task=args.task,
        num_labels=args.num_labels,
        grad_accumulation=args.grad_accumulation,
    )


def options_from_args(args):
    """The parsed flags as one :class:`~neurarch.options.Options` (checked as it is made)."""
    from ..options import CostOptions, InputOptions, Options, PlanOptions, parse_shape

    if args.max_rows is not None and args.max_rows < 0:
        raise NeurarchError(f"--max-rows must be 0 (all) or positive, got {args.max_rows}")
    if not (args.cost or args.plan) and (args.tokens or args.samples or args.price):
        raise NeurarchError("--samples/--tokens/--price only apply with --cost or --plan")
    inputs = InputOptions(
        batch=1 if args.batch is None else args.batch,
        seq_len=args.seq_len,
        image_size=args.image_size,
        input_shape=parse_shape(args.input_shape) if args.input_shape else None,
        decoder_seq_len=args.decoder_seq_len,
    )
    cost = None
    if args.cost or args.plan:
        prices = {}
        for item in args.price:
            name, sep, value = item.partition("=")
            if not sep or not name.strip():
                raise NeurarchError(f"--price must look like A10G=1.20, got {item!r}")
            prices[name.strip()] = value.strip()
        cost = CostOptions(
            epochs=args.epochs,
            samples=args.samples,
            tokens=args.tokens,
            batch=args.batch,
            precision=args.precision,
            card=args.card[0].split(":")[0] if args.card else CostOptions.card,
            cards=tuple(c for c in args.card if ":" in c),
            prices=prices,
        )
    plan = None
    if args.plan:
        plan = PlanOptions(
            modes=tuple(m.strip() for m in args.modes.split(",") if m.strip()),
            optimizer=args.optimizer,
            lora_rank=args.lora_rank,
            grad_checkpointing=args.grad_checkpointing,
            headroom=args.headroom,
            context_len=args.context_len,
            **recipe_args(args),
        )
    from ..verify import parse_disable

    return Options(
        inputs=inputs,
        depth=args.depth,
        revision=args.revision,
        trust_remote_code=args.trust_remote_code,
        offline=True if args.offline else None,
        backward=not args.no_backward,
        timeout_s=args.timeout,
        cost=cost,
        plan=plan,
        precision=args.precision,
        from_scratch=args.from_scratch,
        disable=parse_disable(args.disable),
        verify=not args.no_verify,
    )


def run(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    opts = options_from_args(args)  # a bad flag is answered here, before torch is imported
    from ..pipeline import analyze
    from ..render import render

    max_rows = None if args.max_rows == 0 else args.max_rows
    reports, failed = [], 0
    for spec in args.models:
        try:
            reports.append(analyze(spec, opts))
        except NeurarchError as e:
            if args.debug:
                raise
            if len(args.models) == 1:
                raise
            print(f"neurarch-trace: error: {spec}: {e}", file=sys.stderr)
            failed += 1
    color = args.output is None and sys.stdout.isatty() and "NO_COLOR" not in os.environ
    if args.format == "json":
        text = reports[0].model_dump_json(indent=2) if len(args.models) == 1 else json.dumps([json.loads(r.model_dump_json()) for r in reports], indent=2)
    elif args.format == "jsonl":
        text = "\n".join(r.model_dump_json() for r in reports)
    else:
        sep = "\n\n" if args.format != "html" else "\n"
        text = sep.join(render(r, args.format, max_rows=max_rows, color=color) for r in reports)
    if reports:
        write(text, args.output)
    server = os.environ.get("NEURARCH_SERVER", "").strip() if args.share is not None else ""
    if server and reports:  # a neurarch server computes it and keeps a permalink
        from ..web.share import share

        for r in reports:
            print(f"shared: {share(r, opts, server)}", file=sys.stderr)
    elif args.share is not None and reports:
        from ..render.html import render_html

        for r in reports:
            path = args.share or tempfile.mkstemp(prefix="neurarch-", suffix=".html")[1]
            if args.share and len(reports) > 1:
                path = str(Path(args.share).with_suffix("")) + f"-{len(reports) and reports.index(r)}.html"
            Path(path).write_text(render_html(r), encoding="utf-8")
            print(f"shared: {path}", file=sys.stderr)
    return EXIT_USAGE if failed else 0
