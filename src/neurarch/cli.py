"""``neurarch-trace``: the command line over :func:`neurarch.analyze`.

    neurarch-trace microsoft/resnet-50
    neurarch-trace ./my-model/ --format json
    neurarch-trace a/config.json b/config.json --format jsonl
    neurarch-trace catalog

Every problem with the input is one line on stderr and exit code 2; a bug is
one line and exit code 1 (``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from . import __version__
from .errors import NeurarchError

EXIT_USAGE = 2
EXIT_BUG = 1


def _add_model_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("input shape (the report always prints what was used)")
    g.add_argument("--batch", type=int, help="batch size: of the trace (default 1) and of a priced run (default 32, or the largest that fits)")
    g.add_argument("--seq-len", type=int, help="tokens per sample for text models (default 2048 decoders / 512 encoders, capped by the model's positions)")
    g.add_argument("--image-size", type=int, help="image side in pixels (default: the config's image_size, else 224)")
    g.add_argument("--input-shape", help="per-sample shape for plain modules, e.g. 3,224,224 or 64")
    g.add_argument("--decoder-seq-len", type=int, help="encoder-decoders: the decoder's tokens, i.e. the labels' length (default: as many as the encoder's)")
    g = p.add_argument_group("plan: what it costs to run (--cost; --plan adds it)")
    g.add_argument("--cost", action="store_true", help="price a training run on every card (roofline estimate)")
    g.add_argument("--plan", action="store_true", help="the full plan: GPU memory per mode, what fits on which card, sharded plans, and the cost")
    g.add_argument("--modes", default="full,lora,qlora,inference", help="memory modes to simulate (default: full,lora,qlora,inference)")
    g.add_argument("--optimizer", default="adamw", help="adamw (default: torch's foreach AdamW) | adamw-fused (the HF Trainer's adamw_torch_fused) | adamw-8bit | sgd | adafactor")
    g.add_argument("--lora-rank", type=int, default=16, help="LoRA rank (default 16)")
    g.add_argument("--lora-targets", metavar="NAMES", help="peft target_modules: module names such as q_proj,v_proj, or all-linear (default: every linear layer but the head)")
    g.add_argument("--lora-dropout", type=float, default=0.0, help="LoRA dropout (peft's default 0.0; recipes use 0.05-0.1: it keeps a dropped copy of each adapted input)")
    g.add_argument("--adapter-dtype", choices=["fp32", "bf16"], help="LoRA adapter weights: fp32 (peft's default over a bf16 base) or bf16 (pure-bf16 training)")
    g.add_argument("--attn-implementation", choices=["eager", "sdpa", "flash_attention_2"], help="attention as transformers names it (default: what transformers picks on a CUDA card, usually sdpa); flash_attention_2 follows CUDA's flash kernel")
    g.add_argument("--task", choices=["causal-lm", "seq-cls", "token-cls", "masked-lm", "seq2seq-lm", "backbone"], help="the head you fine-tune (default: the config's architectures[0]); the checkpoint comparison keeps the published head")
    g.add_argument("--num-labels", type=int, default=2, help="classes for --task seq-cls / token-cls (default 2)")
    g.add_argument("--grad-checkpointing", action="store_true", help="recompute activations in backward (transformers' gradient_checkpointing_enable, non-reentrant)")
    g.add_argument("--grad-accumulation", type=int, default=1, metavar="N", help="micro-batches per optimizer step (the Trainer's gradient_accumulation_steps; --batch is the micro-batch): later ones run with the gradients alive")
    g.add_argument("--headroom", type=float, default=1.15, help="a card fits when peak x headroom <= its memory (default 1.15)")
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


def _trace_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="neurarch-trace",
        description="Rebuild a model from its config on fake tensors (no weights read) and report its layers and exact parameter counts.",
        epilog="Other commands: `neurarch-trace catalog` lists the bundled offline catalog; `neurarch-trace checks` lists the verifier's rules; `neurarch-trace measure MODEL` runs real training steps and compares the measured peak with the estimate.",
    )
    p.add_argument("models", nargs="+", metavar="MODEL", help="hub id, catalog id, config.json, model folder, timm:NAME, torchvision:NAME or python:FILE.py:Factory")
    p.add_argument("--format", "-f", choices=["text", "json", "jsonl", "markdown", "html"], default="text")
    p.add_argument("--depth", type=int, help="layer-table granularity: modules at this depth (default: compute layers, attention/MLP blocks as one row)")
    p.add_argument("--max-rows", type=int, default=80, help="rows of the layer table in text/markdown (default 80, 0 = all); JSON/HTML always have all")
    p.add_argument("--share", nargs="?", const="", metavar="PATH", help="also write the HTML page to PATH (default: a temp file) and print its path")
    p.add_argument("--output", "-o", metavar="PATH", help="write the output to a file instead of stdout")
    p.add_argument("--version", action="version", version=f"neurarch {__version__}")
    _add_model_options(p)
    return p


def _catalog_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="neurarch-trace catalog", description="List the bundled offline catalog of published configs.")
    p.add_argument("--format", "-f", choices=["text", "json"], default="text")
    p.add_argument("--debug", action="store_true")
    return p


def _recipe(args) -> dict:
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


def _options(args):
    """The parsed flags as one :class:`~neurarch.options.Options` (checked as it is made)."""
    from .options import CostOptions, InputOptions, Options, PlanOptions, parse_shape

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
            **_recipe(args),
        )
    from .verify import parse_disable

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


def _write(text: str, path: str | None) -> None:
    if path:
        Path(path).write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()


def _run_trace(argv: list[str]) -> int:
    args = _trace_parser().parse_args(argv)
    opts = _options(args)  # a bad flag is answered here, before torch is imported
    from .pipeline import analyze
    from .render import render

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
        _write(text, args.output)
    server = os.environ.get("NEURARCH_SERVER", "").strip() if args.share is not None else ""
    if server and reports:  # a neurarch server computes it and keeps a permalink
        from .web.share import share

        for r in reports:
            print(f"shared: {share(r, opts, server)}", file=sys.stderr)
    elif args.share is not None and reports:
        from .render.html import render_html

        for r in reports:
            path = args.share or tempfile.mkstemp(prefix="neurarch-", suffix=".html")[1]
            if args.share and len(reports) > 1:
                path = str(Path(args.share).with_suffix("")) + f"-{len(reports) and reports.index(r)}.html"
            Path(path).write_text(render_html(r), encoding="utf-8")
            print(f"shared: {path}", file=sys.stderr)
    return EXIT_USAGE if failed else 0


def _run_measure(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="neurarch-trace measure",
        description="Run real training steps on this machine (random weights) and put the measured peak beside the estimate.",
    )
    p.add_argument("model", metavar="MODEL")
    p.add_argument("--mode", default="full", choices=["full", "lora", "qlora"])
    p.add_argument("--precision", default="bf16-mixed")
    p.add_argument("--optimizer", default="adamw")
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--grad-checkpointing", action="store_true")
    p.add_argument("--grad-accumulation", type=int, default=1, metavar="N")
    p.add_argument("--lora-targets", metavar="NAMES", help="peft target_modules, e.g. q_proj,v_proj (default: all-linear)")
    p.add_argument("--lora-dropout", type=float, default=0.0)
    p.add_argument("--adapter-dtype", choices=["fp32", "bf16"])
    p.add_argument("--attn-implementation", choices=["eager", "sdpa"])
    p.add_argument("--task", choices=["causal-lm", "seq-cls", "token-cls", "masked-lm", "seq2seq-lm", "backbone"])
    p.add_argument("--num-labels", type=int, default=2)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--steps", type=int, default=2, help="real steps to run (default 2: the second is the steady state)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--image-size", type=int)
    p.add_argument("--input-shape")
    p.add_argument("--decoder-seq-len", type=int)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--format", "-f", choices=["text", "json"], default="text")
    p.add_argument("--debug", action="store_true")
    args = p.parse_args(argv)
    from .inputs import InputOptions, parse_shape
    from .measure import render_text, run

    result = run(
        args.model,
        inputs=InputOptions(batch=args.batch, seq_len=args.seq_len, image_size=args.image_size,
                            input_shape=parse_shape(args.input_shape) if args.input_shape else None,
                            decoder_seq_len=args.decoder_seq_len),
        mode=args.mode,
        precision=args.precision,
        optimizer=args.optimizer,
        lora_rank=args.lora_rank,
        grad_checkpointing=args.grad_checkpointing,
        device=args.device,
        steps=args.steps,
        trust_remote_code=args.trust_remote_code,
        **_recipe(args),
    )
    _write(result.model_dump_json(indent=2) if args.format == "json" else render_text(result), None)
    return 0


def _run_catalog(argv: list[str]) -> int:
    args = _catalog_parser().parse_args(argv)
    from .sources.catalog import entries

    es = list(entries().values())
    if args.format == "json":
        _write(json.dumps([{"id": e.id, "tier": e.tier, "architecture": e.architecture, "model_type": e.model_type, "checkpoint": e.checkpoint_count, "provenance": e.provenance, "checkpoint_source": e.checkpoint_source} for e in es], indent=2), None)
        return 0
    import io

    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"Bundled catalog ({len(es)} published configs; tier A = from the Hub page, B = verbatim copy in public code, C = reconstructed)", title_justify="left")
    for col in ("id", "tier", "architecture", "checkpoint scalars"):
        t.add_column(col, justify="right" if col.startswith("checkpoint") else "left")
    for e in es:
        t.add_row(e.id, e.tier, e.architecture or "—", f"{e.checkpoint_count:,}" if e.checkpoint_count else "—")
    buf = io.StringIO()
    Console(file=buf, width=120, color_system=None).print(t)
    _write(buf.getvalue(), None)
    return 0


# Subcommands: module and function, imported only when that command runs (so
# `--help` and `catalog` start in a fraction of a second).
COMMANDS = {
    "catalog": ("neurarch.cli", "_run_catalog"),
    "checks": ("neurarch.verify.cli", "main"),
    "measure": ("neurarch.cli", "_run_measure"),
    "changes": ("neurarch.changes.cli", "run_changes"),
    "diff": ("neurarch.changes.cli", "run_diff"),
    "serve": ("neurarch.web.cli", "main"),
}


def _command(name: str):
    import importlib

    module, func = COMMANDS[name]
    return getattr(importlib.import_module(module), func)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        if argv and argv[0] in COMMANDS:
            return _command(argv[0])(argv[1:])
        return _run_trace(argv)
    except NeurarchError as e:
        if debug:
            raise
        print(f"neurarch-trace: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("neurarch-trace: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # a bug: one line unless --debug
        if debug:
            raise
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"neurarch-trace: internal error: {type(e).__name__}: {msg} (run with --debug for the traceback)", file=sys.stderr)
        return EXIT_BUG


if __name__ == "__main__":
    sys.exit(main())
