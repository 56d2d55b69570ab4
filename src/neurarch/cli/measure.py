"""``neurarch-trace measure MODEL``: real training steps on this machine beside the estimate."""

from __future__ import annotations

import argparse

from ..options import ADAPTER_DTYPES, ATTENTIONS, MODES, TASKS
from .common import write
from .trace import _true_false, recipe_args


def run(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="neurarch-trace measure",
        description="Run real training steps on this machine (random weights) and put the measured peak beside the estimate.",
    )
    p.add_argument("model", metavar="MODEL")
    p.add_argument("--mode", default="full", choices=[m for m in MODES if m != "inference"])
    p.add_argument("--precision", default="bf16-mixed")
    p.add_argument("--optimizer", default="adamw")
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--grad-checkpointing", action="store_true")
    p.add_argument("--grad-checkpointing-reentrant", action="store_true", help='with --grad-checkpointing: gradient_checkpointing_kwargs={"use_reentrant": True}')
    p.add_argument("--zero-grad-set-to-none", type=_true_false, default=True, metavar="{true,false}", help="false keeps the gradients, zeroed, between steps (torch 1.x's zero_grad())")
    p.add_argument("--grad-accumulation", type=int, default=1, metavar="N")
    p.add_argument("--lora-targets", metavar="NAMES", help="peft target_modules, e.g. q_proj,v_proj (default: all-linear)")
    p.add_argument("--lora-dropout", type=float, default=0.0)
    p.add_argument("--adapter-dtype", choices=ADAPTER_DTYPES)
    p.add_argument("--attn-implementation", choices=[a for a in ATTENTIONS if a != "flash_attention_2"])
    p.add_argument("--task", choices=TASKS)
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
    from ..estimate_check import render_text
    from ..estimate_check import run as measure_run
    from ..options import InputOptions, parse_shape

    result = measure_run(
        args.model,
        inputs=InputOptions(
            batch=args.batch, seq_len=args.seq_len, image_size=args.image_size, input_shape=parse_shape(args.input_shape) if args.input_shape else None, decoder_seq_len=args.decoder_seq_len
        ),
        mode=args.mode,
        precision=args.precision,
        optimizer=args.optimizer,
        lora_rank=args.lora_rank,
        grad_checkpointing=args.grad_checkpointing,
        grad_checkpointing_reentrant=args.grad_checkpointing_reentrant,
        zero_grad_set_to_none=args.zero_grad_set_to_none,
        device=args.device,
        steps=args.steps,
        trust_remote_code=args.trust_remote_code,
        **recipe_args(args),
    )
    write(result.model_dump_json(indent=2) if args.format == "json" else render_text(result), None)
    return 0
