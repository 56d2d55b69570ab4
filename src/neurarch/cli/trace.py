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
from typing import Any

from .. import __version__
from ..errors import NeurarchError
from ..options import ADAPTER_DTYPES, ATTENTIONS, DEFAULT_HEADROOM, DEFAULT_LORA_RANK, FORMATS, MODES, TASKS
from .common import EXIT_USAGE, write

DEFAULT_MEMORY_SHARE = 0.9  # of the machine's memory: a run past it is stopped before the machine swaps or the OOM killer acts
# The parent stops a model a margin after --timeout (the pipeline's own limit answers first, with its own
# message), and kills it a grace later if it does not stop (stuck in C code): 30 s and 10 s at most.
LIMIT_MARGIN_S = 30.0
LIMIT_GRACE_S = 10.0


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
    g.add_argument(
        "--optimizer",
        default="adamw",
        help="adamw (default: torch's foreach AdamW) | adamw-fused (the HF Trainer's adamw_torch_fused) | adamw-8bit | sgd | adafactor (torch's) | adafactor-trainer (the HF Trainer's optim=adafactor)",
    )
    g.add_argument("--lora-rank", type=int, default=DEFAULT_LORA_RANK, help=f"LoRA rank (default {DEFAULT_LORA_RANK})")
    g.add_argument("--lora-targets", metavar="NAMES", help="peft target_modules: module names such as q_proj,v_proj, or all-linear (default: every linear layer but the head)")
    g.add_argument("--lora-dropout", type=float, default=0.0, help="LoRA dropout (peft's default 0.0; recipes use 0.05-0.1: it keeps a dropped copy of each adapted input)")
    g.add_argument("--adapter-dtype", choices=ADAPTER_DTYPES, help="LoRA adapter weights: fp32 (peft's default over a bf16 base) or bf16 (pure-bf16 training)")
    g.add_argument(
        "--attn-implementation",
        choices=ATTENTIONS,
        help="attention as transformers names it (default: what transformers picks on a CUDA card, usually sdpa); flash_attention_2 follows CUDA's flash kernel",
    )
    g.add_argument("--task", choices=TASKS, help="the head you fine-tune (default: the config's architectures[0]); the checkpoint comparison keeps the published head")
    g.add_argument("--num-labels", type=int, default=2, help="classes for --task seq-cls / token-cls (default 2)")
    g.add_argument("--grad-checkpointing", action="store_true", help="recompute activations in backward (transformers' gradient_checkpointing_enable, non-reentrant)")
    g.add_argument(
        "--grad-checkpointing-reentrant",
        action="store_true",
        help='with --grad-checkpointing: gradient_checkpointing_kwargs={"use_reentrant": True}, what torch.utils.checkpoint runs when use_reentrant is not passed, as transformers 4.x called it',
    )
    g.add_argument(
        "--zero-grad-set-to-none",
        type=_true_false,
        default=True,
        metavar="{true,false}",
        help="optimizer.zero_grad(set_to_none=...): true (torch 2's default) frees the gradients after each step; false keeps them, zeroed, through the next step (torch 1.x, the Trainer's model.zero_grad() of 2022)",
    )
    g.add_argument(
        "--grad-accumulation",
        type=int,
        default=1,
        metavar="N",
        help="micro-batches per optimizer step (the Trainer's gradient_accumulation_steps; --batch is the micro-batch): later ones run with the gradients alive",
    )
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
    g.add_argument("--no-cache", action="store_true", help="recompute every simulation and store none (default: reuse the ones cached on disk in $NEURARCH_CACHE_DIR/sims)")
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
    p.add_argument("--memory-limit", metavar="SIZE", help=f"stop a model whose run holds more resident memory than this, e.g. 16GiB (default: {DEFAULT_MEMORY_SHARE:.0%}% of this machine's memory)")
    add_model_options(p)
    return p


def _true_false(text: str) -> bool:
    low = text.strip().lower()
    if low not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return low == "true"


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
            grad_checkpointing_reentrant=args.grad_checkpointing_reentrant,
            zero_grad_set_to_none=args.zero_grad_set_to_none,
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
        cache=not getattr(args, "no_cache", False),
    )


class _Refused(NeurarchError):
    """A NeurarchError raised in the supervised child, carried back to the parent as its message and exit code."""

    def __init__(self, message: str, exit_code: int):
        self.exit_code = exit_code
        super().__init__(message)


def _analyze_in_child(spec: str, opts):
    """The supervised child's work: the report, or a NeurarchError as a value (its exit code kept).
    A process of its own for one model, which ends with it: no cyclic collection at all (neurarch.jobs.hold_collection)."""
    from ..jobs import hold_collection, release_collection

    hold_collection(whole_run=True)  # before the imports below: they are most of what it spares
    from ..pipeline import analyze

    try:
        return "ok", analyze(spec, opts)
    except NeurarchError as e:
        return "refused", str(e), e.exit_code
    finally:
        release_collection()  # analyze released it once built; not if it answered sooner


def _machine_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _limits(args, opts) -> tuple[float, int | None]:
    """The parent's limits: a little past the pipeline's own time limit (its clean message comes first), and memory."""
    memory: int | None
    if args.memory_limit is not None:
        from ..sweep.cli import parse_bytes

        memory = parse_bytes(args.memory_limit)
    else:
        ram = _machine_memory()
        memory = int(ram * DEFAULT_MEMORY_SHARE) if ram else None
    return opts.time_limit_s + min(LIMIT_MARGIN_S, opts.time_limit_s / 4), memory


# What the supervisor imports while the command reads its options and asks the report cache:
# every model's child forks from it with the pipeline (torch, transformers) already imported.
PRELOAD = ("neurarch.pipeline",)


def start_supervisor(args, supervised: bool) -> Any:
    """The supervising process, started before the options are checked and the report cache
    asked (a few tenths of a second of imports here), so that it imports the pipeline meanwhile,
    on another core; None where the command does not supervise.  A bad option or a plan the
    report cache answers closes it unused (killed, if still importing)."""
    if not supervised or args.debug or os.environ.get("NEURARCH_SUPERVISE", "1") == "0":
        return None
    from ..supervise import Supervisor

    return Supervisor(PRELOAD, capture_output=False, wait=False)


class _Analyzer:
    """``analyze`` in this process, or (the console command) each model in a child process whose wall clock
    and resident memory the parent watches and enforces (neurarch.supervise): a model stuck in C code or
    filling the machine's memory is killed, and the command answers in one line."""

    def __init__(self, args, opts, supervisor: Any = None):
        self.args, self.opts = args, opts
        self.supervisor: Any = supervisor  # started before the options were read (:func:`start_supervisor`); None: no supervision
        self.supervised = supervisor is not None
        if self.supervised:
            self.time_limit_s, self.memory_limit = _limits(args, opts)

    def __call__(self, spec: str):
        from ..warm import lookup

        hit = lookup(spec, self.opts)  # a plan kept in the report cache: answered here, without torch (neurarch.warm)
        if hit is not None:
            return hit
        if not self.supervised:
            from ..pipeline import analyze

            return analyze(spec, self.opts)
        out = self.supervisor.run(
            _analyze_in_child, (spec, self.opts), time_limit_s=self.time_limit_s, memory_limit_bytes=self.memory_limit, grace_s=min(LIMIT_GRACE_S, max(2.0, self.opts.time_limit_s / 2))
        )
        if out.ok and out.value[0] == "ok":
            return out.value[1]
        if out.ok:  # a NeurarchError in the child
            raise _Refused(out.value[1], out.value[2])
        if out.status == "memory":
            raise NeurarchError(f"{spec}: stopped: {out.error}; raise the limit with --memory-limit (e.g. 64GiB)")
        if out.status in ("timeout", "hang"):
            raise NeurarchError(f"{spec}: stopped after {out.seconds:,.0f} s, over the time limit of {self.opts.time_limit_s:g} s (raise it with --timeout)")
        raise RuntimeError(out.error or f"the process analysing {spec} ended without an answer")

    def close(self) -> None:
        if self.supervisor is not None:
            self.supervisor.close()


def run(argv: list[str], supervised: bool = False) -> int:
    args = parser().parse_args(argv)
    supervisor = start_supervisor(args, supervised)
    try:
        opts = options_from_args(args)  # a bad flag is answered here, before torch is imported (here)
        analyzer = _Analyzer(args, opts, supervisor)  # ... and a bad limit here
    except BaseException:
        if supervisor is not None:
            supervisor.close()
        raise
    from ..render import render

    max_rows = None if args.max_rows == 0 else args.max_rows
    reports, failed = [], 0
    try:
        for spec in args.models:
            try:
                reports.append(analyzer(spec))
            except NeurarchError as e:
                if args.debug:
                    raise
                if len(args.models) == 1:
                    raise
                print(f"neurarch-trace: error: {spec}: {e}", file=sys.stderr)
                failed += 1
    finally:
        analyzer.close()
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
