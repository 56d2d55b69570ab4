"""Published GPU memory measurements beside neurarch's simulated figures (issue 10).

Public pages that report how much GPU memory a training run took are
reproduced here with neurarch's memory simulator: each row states the run's
setup as data (model, mode, batch, sequence length, precision, optimizer,
attention, gradient checkpointing, LoRA, task), the figure the source quotes,
what that figure measured, and the figure of ours that measures the same
thing:

* ``torch.cuda.max_memory_allocated`` (the caching allocator's peak of live
  blocks): ours is ``memory.<mode>.peak_tensor_bytes``;
* ``nvidia-smi`` / pynvml ``memory.used`` (the whole process on the card: the
  CUDA context, the kernels loaded, and everything the caching allocator has
  reserved, free or not): ours is ``memory.<mode>.peak_bytes`` with its own
  fixed overhead (a lazy-loading CUDA context and Hopper's cuBLAS workspaces)
  replaced by the context the source itself printed and the workspaces of the
  source's card.  Allocator fragmentation (reserved - allocated) is not
  simulated, so these rows are expected to come out low by that much.

Every figure of ours comes from running ``neurarch-trace CONFIG --plan ...
--format json`` (the CLI a user runs) on the configs in
``benchmarks/published/configs/`` (provenance in ``PROVENANCE.tsv`` there).
Options a row needs that this version of neurarch does not have yet (read
from ``neurarch-trace --help``) fall back to the nearest one it has; the row
says which, and is left out of the "as the source ran it" median.  Rerun the
script when options land: a row whose command line changes is simulated again.

One setup part is the benchmark's own, not a neurarch option: the T5 v1.1 /
mT5 rows (T0_3B, mt0-xxl) set ``separate_lm_head``.  Their sources ran
transformers 4.x, which built the separate ``lm_head`` their configs ask for
(``tie_word_embeddings: false``); transformers 5.x's T5Config ties it always.
Those rows are built here as transformers 4.x built them (the model the
installed transformers builds, with ``lm_head`` given its own weight; the
encoder and decoder embeddings stay shared, as 4.x shared them), checked
against the published parameter count, and simulated through the library
functions the CLI calls (``build_from_config``, ``plan_inputs``,
``plan.memory.estimate``) with the same options.

Run::

    nice -n 10 python benchmarks/published.py              # runs what is not cached, writes docs/published.md
    python benchmarks/published.py --only bert-vanilla     # some rows (comma-separated ids)
    python benchmarks/published.py --recompute             # ignore the cache
    python benchmarks/published.py --doc-only              # rewrite the doc from the cache, run nothing

Results are cached in ``benchmarks/published/estimates.json`` (keyed by row;
an entry is reused while the row's command line is unchanged and it gave a
figure; ``--recompute`` runs it again, e.g. after a fix that changes no option).  The 3B-13B models take
tens of seconds to a few minutes each on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from neurarch.plan.overhead import CUBLAS_WORKSPACE_OTHER

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent / "published"
CONFIGS = HERE / "configs"
CACHE = HERE / "estimates.json"
DOC = ROOT / "docs" / "published.md"

MiB = 2**20

# cuBLAS workspace per handle before Hopper (aten/src/ATen/cuda/CublasHandlePool.cpp, ":4096:2:16:8"),
# the constant neurarch.plan.overhead uses.


# --------------------------------------------------------------------------
# Sources: where each quoted figure comes from, and what it measured.
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    key: str
    title: str  # the page title, as users find it
    url: str
    section: str  # where on the page
    measured: str  # "nvidia-smi" | "max_memory_allocated"
    gpu: str
    workspace: int  # cuBLAS workspace bytes per handle on that GPU
    context_bytes: int | None  # CUDA context the source printed (nvidia-smi rows), else None
    unit_bytes: int  # bytes per quoted unit
    setup: str  # the run's setup in the source's words, and where it is unclear


HF_SINGLE_GPU = Source(
    key="hf-single-gpu",
    title="Efficient Training on a Single GPU (Transformers documentation v4.21.0)",
    url="https://huggingface.co/docs/transformers/v4.21.0/perf_train_gpu_one",
    section="sections Vanilla Training, Gradient Accumulation, Gradient Checkpointing, FP16 Training, Adafactor and 8-bit Adam "
    "(source file docs/source/en/perf_train_gpu_one.mdx of huggingface/transformers). Later versions split the page: "
    '"Model training anatomy" (https://huggingface.co/docs/transformers/model_memory_anatomy) keeps the setup, the '
    'context, the model-loaded and the vanilla figures (1343, 2631 and 14949 MB); "Methods and tools for efficient '
    'training on a single GPU" no longer prints the other figures',
    measured="nvidia-smi",
    gpu="Tesla V100-SXM2 16 GB (the page's nvidia-smi printout: driver 460.91.03, CUDA 11.2)",
    workspace=CUBLAS_WORKSPACE_OTHER,
    # "torch.ones((1, 1)).to("cuda") ... GPU memory occupied: 1343 MB." (info.used // 1024**2, so MiB)
    context_bytes=1343 * MiB,
    unit_bytes=MiB,  # print(f"GPU memory occupied: {info.used//1024**2} MB.") -> MiB, rounded down
    setup="bert-large-uncased loaded with AutoModelForSequenceClassification (a 2-way classifier head), 512 random "
    "sequences of 512 tokens, the Trainer (transformers v4.21, 2022) with default_args output_dir/evaluation_strategy "
    '"steps"/num_train_epochs 1, no eval_dataset; memory read with pynvml\'s memory.used after trainer.train() '
    "returns (so it holds the CUDA context, the kernels and the caching allocator's reserved blocks at their "
    "high-water mark). The page prints the context alone (1343 MB after a 1x1 tensor) and the model alone "
    '(2631 MB after .to("cuda")); the context is not subtracted from the quoted figures. Trainer defaults of '
    "that version: optim adamw_hf (transformers' AdamW, a per-parameter loop), model.zero_grad() without "
    "set_to_none (torch 1.x), BERT's eager attention (the only one it had), dropout 0.1 in training.",
)

PEFT_README = Source(
    key="peft-readme",
    title='PEFT README, "Get comparable performance to full finetuning by adapting LLMs to downstream tasks using consumer hardware"',
    url="https://github.com/huggingface/peft/blob/0032f32a82fcec45748606a1b9dcc52986cef168/README.md#use-cases",
    section='table "GPU memory required for adapting LLMs on the few-shot dataset ought/raft/twitter_complaints" '
    "(columns Full Finetuning and PEFT-LoRA PyTorch; README.md of huggingface/peft at commit 0032f32, early 2023)",
    measured="max_memory_allocated",
    gpu='A100 80GB ("Hardware: Single A100 80GB GPU with CPU RAM above 64GB")',
    workspace=CUBLAS_WORKSPACE_OTHER,
    context_bytes=None,
    # The example scripts print b2mb(torch.cuda.max_memory_allocated()) = int(bytes / 2**20), i.e. MiB; the README
    # writes e.g. "14.4GB". We read X GB as X * 1000 MiB; read as GiB every figure would be 2.4 % higher.
    unit_bytes=1000 * MiB,
    setup="The README names neither the script nor the settings behind the table. The example scripts of that time "
    "(examples/conditional_generation/pet_lora_seq2seq_accelerate_ds_zero3_offload.py at commit 30c54dc for T0_3B and "
    "examples/causal_language_modeling/pet_lora_clm_accelerate_ds_zero3_offload.py at commit 9ef0d85 for bloomz-7b1, "
    'from when the library was called pet; presumably run without DeepSpeed for the "PyTorch" column) use: LoraConfig(r=8, lora_alpha=32, lora_dropout=0.1) with peft\'s default '
    "target modules (t5/mt5: q, v; bloom: query_key_value), batch size 8, no mixed precision (fp32), "
    "torch.optim.AdamW, optimizer.zero_grad() (torch 1.13: grads kept, zeroed), and the figure printed is "
    '"GPU Total Peak Memory consumed during the train (max)" = max_memory_allocated in MiB, reset per epoch. '
    "seq2seq (T0_3B, mt0-xxl): inputs padded to the longest tweet of the batch (not stated; tweets are at most "
    '280 characters), labels padded to the longest class label ("no complaint": 3 tokens with the T5 tokenizer). '
    "causal LM (bloomz-7b1): every sample left-padded to max_length 64. Which epoch's figure the README quotes, "
    "the script used for mt0-xxl and for the Full Finetuning column, and whether GB means 1000 MiB or GiB "
    "are not stated.",
)

SOURCES = {s.key: s for s in (HF_SINGLE_GPU, PEFT_README)}


# --------------------------------------------------------------------------
# Rows: one published measurement each, its setup as data.
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """A training run as the source ran it, in neurarch's terms where it has them."""

    config: str  # file in benchmarks/published/configs/ (no .json)
    mode: str  # full | lora
    batch: int
    seq: int
    precision: str  # fp32 | fp16-mixed | bf16-mixed | bf16
    optimizer: str  # neurarch's name for the optimizer the source ran
    optimizer_as_run: str  # the source's own optimizer, in its words
    attention: str  # eager | sdpa | flash_attention_2 (transformers' names)
    grad_checkpointing: bool = False
    grad_accumulation: int = 1  # micro-batches per optimizer step (the peak is a micro-batch's: batch is per micro-batch)
    task: str | None = None  # seq-cls | causal-lm | seq2seq-lm ...
    num_labels: int | None = None
    lora_rank: int | None = None
    lora_alpha: int | None = None
    lora_dropout: float | None = None
    lora_targets: str | None = None
    decoder_seq: int | None = None  # encoder-decoders: the labels' length, where it differs from the input's
    zero_grad_to_none: bool = True  # False: grads kept (zeroed) between steps, torch 1.x's zero_grad() default
    # With grad_checkpointing: torch.utils.checkpoint's reentrant variant (torch 1.x's default, which
    # transformers 4.2x called without use_reentrant)
    checkpoint_reentrant: bool = False
    # Built as transformers 4.x built it: a separate lm_head (T5 v1.1 / mT5 configs say
    # tie_word_embeddings false; transformers 5.x ties it always). The published parameter count
    # the build must then give.
    separate_lm_head: bool = False
    published_parameters: int | None = None


@dataclass(frozen=True)
class Row:
    id: str
    source: str  # key into SOURCES
    label: str  # the source's name for the run
    quoted: float | None  # the figure as printed, in the source's unit (None: the source says OOM)
    quoted_text: str  # exactly as printed
    setup: Setup
    oom_on_bytes: int | None = None  # for "OOM" rows: the card's memory
    unclear: tuple = ()  # setup facts the source leaves open, and what we assumed


BERT = {
    "config": "bert-large-uncased",
    "seq": 512,
    "attention": "eager",
    "task": "seq-cls",
    "num_labels": 2,
    "zero_grad_to_none": False,
    "checkpoint_reentrant": True,  # transformers v4.21's BertEncoder: torch.utils.checkpoint.checkpoint(...), reentrant on torch 1.x
    "optimizer_as_run": "adamw_hf (transformers.AdamW, per-parameter loop)",
}
HF_ADAMW = {"optimizer": "adamw-fused"}  # a loop over parameters keeps no multi-tensor scratch: fused is the nearest

ROWS: list[Row] = [
    Row("bert-vanilla", "hf-single-gpu", "Vanilla Training: per_device_train_batch_size=4", 14949, "GPU memory occupied: 14949 MB.", Setup(**BERT, **HF_ADAMW, mode="full", batch=4, precision="fp32")),
    Row(
        "bert-ga",
        "hf-single-gpu",
        "Gradient Accumulation: batch 1, gradient_accumulation_steps=4",
        8681,
        "GPU memory occupied: 8681 MB.",
        Setup(**BERT, **HF_ADAMW, mode="full", batch=1, grad_accumulation=4, precision="fp32"),
    ),
    Row(
        "bert-ga-gc",
        "hf-single-gpu",
        "Gradient Checkpointing: batch 1, accumulation 4, gradient_checkpointing=True",
        6775,
        "GPU memory occupied: 6775 MB.",
        Setup(**BERT, **HF_ADAMW, mode="full", batch=1, grad_accumulation=4, grad_checkpointing=True, precision="fp32"),
    ),
    Row("bert-fp16", "hf-single-gpu", "FP16 Training: batch 4, fp16=True", 13939, "GPU memory occupied: 13939 MB.", Setup(**BERT, **HF_ADAMW, mode="full", batch=4, precision="fp16-mixed")),
    Row(
        "bert-ga-gc-fp16",
        "hf-single-gpu",
        "batch 1, accumulation 4, checkpointing, fp16",
        7275,
        "GPU memory occupied: 7275 MB.",
        Setup(**BERT, **HF_ADAMW, mode="full", batch=1, grad_accumulation=4, grad_checkpointing=True, precision="fp16-mixed"),
    ),
    Row(
        "bert-adafactor",
        "hf-single-gpu",
        'Adafactor: batch 4, optim="adafactor"',
        12295,
        "GPU memory occupied: 12295 MB.",
        Setup(**{**BERT, "optimizer_as_run": 'transformers Adafactor (Trainer optim="adafactor": no first moment)'}, optimizer="adafactor-trainer", mode="full", batch=4, precision="fp32"),
    ),
    Row(
        "bert-ga-gc-fp16-adafactor",
        "hf-single-gpu",
        "batch 1, accumulation 4, checkpointing, fp16, Adafactor",
        4847,
        "GPU memory occupied: 4847 MB.",
        Setup(
            **{**BERT, "optimizer_as_run": 'transformers Adafactor (Trainer optim="adafactor": no first moment)'},
            optimizer="adafactor-trainer",
            mode="full",
            batch=1,
            grad_accumulation=4,
            grad_checkpointing=True,
            precision="fp16-mixed",
        ),
    ),
    Row(
        "bert-adam8bit",
        "hf-single-gpu",
        "8-bit Adam: batch 4, bnb.optim.Adam8bit",
        13085,
        "GPU memory occupied: 13085 MB.",
        Setup(**{**BERT, "optimizer_as_run": "bitsandbytes Adam8bit (blockwise 8-bit state)"}, optimizer="adamw-8bit", mode="full", batch=4, precision="fp32"),
    ),
    Row(
        "bert-ga-gc-fp16-adam8bit",
        "hf-single-gpu",
        "batch 1, accumulation 4, checkpointing, fp16, 8-bit Adam",
        5363,
        "GPU memory occupied: 5363 MB.",
        Setup(
            **{**BERT, "optimizer_as_run": "bitsandbytes Adam8bit (blockwise 8-bit state)"},
            optimizer="adamw-8bit",
            mode="full",
            batch=1,
            grad_accumulation=4,
            grad_checkpointing=True,
            precision="fp16-mixed",
        ),
    ),
]

PEFT_T5 = {
    "batch": 8,
    "precision": "fp32",
    "attention": "eager",
    "task": "seq2seq-lm",
    "decoder_seq": 3,
    "zero_grad_to_none": False,
    "optimizer": "adamw-fused",
    "optimizer_as_run": "torch.optim.AdamW (torch 1.13: single-tensor loop)",
    "separate_lm_head": True,
}
# T5 v1.1 XL (T0_3B) and mT5-XXL (mt0-xxl) with their separate heads: see tests/sources/test_published_configs.py.
T0_PARAMS = 2_849_757_184
MT0_PARAMS = 12_921_057_280
PEFT_LORA = {"mode": "lora", "lora_rank": 8, "lora_alpha": 32, "lora_dropout": 0.1}
TWEET_SEQ = 64  # not stated: see unclear
TWEET_UNCLEAR = (
    ("encoder length: the longest tweet of each batch of 8 (dynamic padding); not stated. We use 64 tokens, the cap the same README's bloomz script puts on prompt + tweet + label"),
    "decoder length: labels padded to the longest class label, 3 tokens",
    "GB read as 1000 MiB (the scripts print MiB)",
)
A100_80GB = 80 * 1024**3

ROWS += [
    Row(
        "t0-full",
        "peft-readme",
        "bigscience/T0_3B, Full Finetuning",
        47.14,
        "47.14GB GPU / 2.96GB CPU",
        Setup(config="bigscience--T0_3B", mode="full", seq=TWEET_SEQ, published_parameters=T0_PARAMS, **PEFT_T5),
        unclear=TWEET_UNCLEAR + ("the script of the Full Finetuning column is not named; we take the LoRA example without LoRA",),
    ),
    Row(
        "t0-lora",
        "peft-readme",
        "bigscience/T0_3B, PEFT-LoRA PyTorch",
        14.4,
        "14.4GB GPU / 2.96GB CPU",
        Setup(config="bigscience--T0_3B", seq=TWEET_SEQ, lora_targets="q,v", published_parameters=T0_PARAMS, **PEFT_T5, **PEFT_LORA),
        unclear=TWEET_UNCLEAR,
    ),
    Row(
        "mt0-lora",
        "peft-readme",
        "bigscience/mt0-xxl, PEFT-LoRA PyTorch",
        56,
        "56GB GPU / 3GB CPU",
        Setup(config="bigscience--mt0-xxl", seq=TWEET_SEQ, lora_targets="q,v", published_parameters=MT0_PARAMS, **PEFT_T5, **PEFT_LORA),
        unclear=TWEET_UNCLEAR + ("the README names no script for mt0-xxl; we take the T0_3B seq2seq example with the model swapped",),
    ),
    Row(
        "bloomz-lora",
        "peft-readme",
        "bigscience/bloomz-7b1, PEFT-LoRA PyTorch",
        32,
        "32GB GPU / 3.8GB CPU",
        Setup(
            config="bigscience--bloomz-7b1",
            mode="lora",
            batch=8,
            seq=64,
            precision="fp32",
            attention="eager",
            task="causal-lm",
            zero_grad_to_none=False,
            optimizer="adamw-fused",
            optimizer_as_run="torch.optim.AdamW (torch 1.13: single-tensor loop)",
            lora_rank=8,
            lora_alpha=32,
            lora_dropout=0.1,
            lora_targets="query_key_value",
        ),
        unclear=("GB read as 1000 MiB (the scripts print MiB)",),
    ),
    Row(
        "mt0-full",
        "peft-readme",
        "bigscience/mt0-xxl, Full Finetuning",
        None,
        "OOM GPU",
        Setup(config="bigscience--mt0-xxl", mode="full", seq=TWEET_SEQ, published_parameters=MT0_PARAMS, **PEFT_T5),
        oom_on_bytes=A100_80GB,
        unclear=TWEET_UNCLEAR,
    ),
    Row(
        "bloomz-full",
        "peft-readme",
        "bigscience/bloomz-7b1, Full Finetuning",
        None,
        "OOM GPU",
        Setup(
            config="bigscience--bloomz-7b1",
            mode="full",
            batch=8,
            seq=64,
            precision="fp32",
            attention="eager",
            task="causal-lm",
            zero_grad_to_none=False,
            optimizer="adamw-fused",
            optimizer_as_run="torch.optim.AdamW (torch 1.13: single-tensor loop)",
        ),
        oom_on_bytes=A100_80GB,
    ),
]


# --------------------------------------------------------------------------
# From a row's setup to a neurarch-trace command line, with today's options.
# --------------------------------------------------------------------------


def cli_help() -> str:
    out = subprocess.run([sys.executable, "-m", "neurarch.cli", "--help"], capture_output=True, text=True, timeout=120, check=False)
    return out.stdout + out.stderr


def command(row: Row, help_text: str) -> tuple[list[str], list[str]]:
    """The neurarch-trace arguments for ``row`` and the setup parts they cannot express (fallbacks)."""
    s = row.setup
    args = [
        str(CONFIGS / f"{s.config}.json"),
        "--plan",
        "--modes",
        s.mode,
        "--batch",
        str(s.batch),
        "--seq-len",
        str(s.seq),
        "--precision",
        s.precision,
        "--no-verify",
        "--format",
        "json",
        "--timeout",
        "3000",
    ]
    missing: list[str] = []

    def has(flag: str) -> bool:
        return flag in help_text

    optimizer = s.optimizer
    from neurarch.options import OPTIMIZERS  # the option's own list: the help text wraps long names

    if optimizer not in OPTIMIZERS:
        fallback = "adamw" if optimizer.startswith("adamw") else optimizer
        missing.append(f"--optimizer {optimizer} (ran {fallback}: multi-tensor foreach AdamW, which keeps scratch the source's {s.optimizer_as_run} did not)")
        optimizer = fallback
    args += ["--optimizer", optimizer]
    if s.grad_checkpointing:
        args.append("--grad-checkpointing")
        if s.checkpoint_reentrant:
            if has("--grad-checkpointing-reentrant"):
                args.append("--grad-checkpointing-reentrant")
            else:
                missing.append("--grad-checkpointing-reentrant (ran non-reentrant checkpointing)")
    if not s.zero_grad_to_none:
        if has("--zero-grad-set-to-none"):
            args += ["--zero-grad-set-to-none", "false"]
        else:
            missing.append("--zero-grad-set-to-none false (ran with the gradients freed after each step: the kept gradients are missing)")
    if s.decoder_seq is not None:
        if has("--decoder-seq-len"):
            args += ["--decoder-seq-len", str(s.decoder_seq)]
        else:
            missing.append(f"--decoder-seq-len {s.decoder_seq} (ran the decoder as long as the encoder, {s.seq} tokens)")
    if s.grad_accumulation > 1:
        if has("--grad-accumulation"):
            args += ["--grad-accumulation", str(s.grad_accumulation)]
        else:
            missing.append(f"--grad-accumulation {s.grad_accumulation} (ran steps of one micro-batch: the kept gradients are missing)")
    if has("--attn-implementation"):
        args += ["--attn-implementation", s.attention]
    else:
        missing.append(f"--attn-implementation {s.attention} (ran what the build picks today: SDPA where the model has it)")
    if s.task:
        if has("--task"):
            args += ["--task", s.task]
            if s.num_labels is not None and has("--num-labels"):
                args += ["--num-labels", str(s.num_labels)]
        else:
            missing.append(f"--task {s.task} (ran the config's architectures[0] head)")
    if s.mode == "lora":
        args += ["--lora-rank", str(s.lora_rank)]
        if s.lora_targets:
            if has("--lora-targets"):
                args += ["--lora-targets", s.lora_targets]
            else:
                missing.append(f"--lora-targets {s.lora_targets} (ran LoRA on every linear layer but the head)")
        if s.lora_dropout:
            if has("--lora-dropout"):
                args += ["--lora-dropout", str(s.lora_dropout)]
            else:
                missing.append(f"--lora-dropout {s.lora_dropout} (ran without dropout on the adapters' input)")
    return args, missing


def git_commit() -> str:
    """The commit the package ran from, with "+uncommitted" when src/ differs from it.  A copy of the
    package from outside this checkout (PYTHONPATH) is named by $NEURARCH_SRC_COMMIT."""
    import neurarch

    if not Path(neurarch.__file__).resolve().is_relative_to(ROOT / "src"):
        return os.environ.get("NEURARCH_SRC_COMMIT", "unknown") + " (a copy of the package outside this checkout)"
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=30, check=False).stdout.strip() or "unknown"
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "src"], capture_output=True, text=True, timeout=30, check=False).stdout.strip()
        return head + ("+uncommitted" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run_row(row: Row, args: list[str], timeout_s: int) -> dict:
    t0 = time.time()
    cmd = [sys.executable, "-m", "neurarch.cli", *args]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {timeout_s} s", "seconds": round(time.time() - t0, 1)}
    seconds = round(time.time() - t0, 1)
    try:
        report = json.loads(out.stdout)
    except json.JSONDecodeError:
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["(no output)"]
        return {"error": f"exit {out.returncode}: {tail[0][:300]}", "seconds": seconds}
    memory = report.get("memory") or {}
    mode = memory.get(row.setup.mode)
    if not mode:
        err = (memory.get("errors") or {}).get(row.setup.mode) or "no memory figure in the report"
        return {"error": str(err)[:400], "seconds": seconds}
    params = report.get("params") or {}
    return {
        "seconds": seconds,
        "peak_tensor_bytes": mode["peak_tensor_bytes"],
        "peak_bytes": mode["peak_bytes"],
        "overhead_bytes": mode["breakdown"].get("overhead", 0),
        "breakdown": mode["breakdown"],
        "phase": mode.get("phase"),
        "module": mode.get("module"),
        "trainable_parameters": mode.get("trainable_parameters"),
        "parameters": params.get("parameters"),
        "notes": mode.get("notes", []),
        "assumptions": memory.get("assumptions", {}),
    }


# --------------------------------------------------------------------------
# Rows built as transformers 4.x built them (a separate lm_head): the same
# options through the library functions the CLI calls.
# --------------------------------------------------------------------------

LIBRARY = "[benchmark: built as transformers 4.x built it, separate lm_head; simulated through the library]"


def build_separate_head(s: Setup):
    """The model the installed transformers builds from the row's config, with ``lm_head`` given a
    weight of its own, as transformers 4.x built T5 v1.1 / mT5 (``tie_word_embeddings: false``); the
    encoder and decoder embeddings stay the shared one, as in 4.x.  Checked against the published count."""
    import torch
    from torch import nn

    from neurarch.build import build_from_config

    path = CONFIGS / f"{s.config}.json"
    built = build_from_config(json.loads(path.read_text()), str(path), attn_implementation=s.attention, task=s.task, strict_attention=True)
    model = built.model
    head = model.get_output_embeddings()
    if head is None or head.weight is not model.get_input_embeddings().weight:
        raise RuntimeError(f"{s.config}: the built model's head is not tied to its embedding; nothing to separate")
    head.weight = nn.Parameter(torch.empty_like(head.weight, device="meta"))  # [vocab, d_model], its own
    n = sum({id(p): p.numel() for p in model.parameters()}.values())
    if s.published_parameters is not None and n != s.published_parameters:
        raise RuntimeError(f"{s.config}: {n:,} parameters with a separate lm_head, the published count is {s.published_parameters:,}")
    return built, n


def run_library(row: Row, args: list[str]) -> dict:
    """Simulate ``row`` with the options ``args`` give the CLI, on the model :func:`build_separate_head` makes."""
    from neurarch.inputs import InputOptions, plan_inputs
    from neurarch.plan.memory import estimate

    s = row.setup
    t0 = time.time()
    if "--attn-implementation" not in args or (s.decoder_seq is not None and "--decoder-seq-len" not in args):
        raise RuntimeError("this neurarch lacks an option the row needs (see the row's fallbacks)")
    built, n = build_separate_head(s)
    plan = plan_inputs(built.model, built.config, InputOptions(batch=s.batch, seq_len=s.seq, decoder_seq_len=s.decoder_seq), None)
    mm = estimate(
        built,
        plan,
        s.mode,
        precision=s.precision,
        optimizer=args[args.index("--optimizer") + 1],
        grad_checkpointing=s.grad_checkpointing,
        grad_checkpointing_reentrant="--grad-checkpointing-reentrant" in args,
        zero_grad_set_to_none="--zero-grad-set-to-none" not in args,
        grad_accumulation=s.grad_accumulation,
        lora_rank=s.lora_rank or 16,
        lora_targets=tuple(s.lora_targets.split(",")) if s.lora_targets and "--lora-targets" in args else None,
        lora_dropout=(s.lora_dropout or 0.0) if "--lora-dropout" in args else 0.0,
        attn_implementation=s.attention,
    )
    return {
        "seconds": round(time.time() - t0, 1),
        "peak_tensor_bytes": mm.peak_tensor_bytes,
        "peak_bytes": mm.peak_bytes,
        "overhead_bytes": mm.breakdown.overhead,
        "breakdown": mm.breakdown.model_dump(),
        "phase": mm.phase,
        "module": mm.module,
        "trainable_parameters": mm.trainable_parameters,
        "parameters": n,
        "notes": mm.notes,
    }


# --------------------------------------------------------------------------
# Our matching figure and the error.
# --------------------------------------------------------------------------


def ours(row: Row, est: dict) -> int:
    """The figure of ours that measures what the source measured."""
    src = SOURCES[row.source]
    if src.measured == "max_memory_allocated":
        return est["peak_tensor_bytes"]
    # nvidia-smi: the simulated reserved peak (rounded blocks), the cuBLAS workspaces of the source's card
    # (two handles in training: the main thread and autograd's device thread), the context the source printed.
    rounded = est["peak_bytes"] - est["overhead_bytes"]
    return rounded + 2 * src.workspace + src.context_bytes


def quoted_bytes(row: Row) -> int | None:
    if row.quoted is None:
        return None
    return round(row.quoted * SOURCES[row.source].unit_bytes)


def error(row: Row, est: dict) -> float | None:
    q = quoted_bytes(row)
    if q is None or "error" in est:
        return None
    return (ours(row, est) - q) / q


# --------------------------------------------------------------------------
# The document.
# --------------------------------------------------------------------------


def fmt_gb(n: int | None) -> str:
    return "—" if n is None else f"{n / 1e9:,.2f} GB"


def fmt_pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:+.1f} %"


def setup_text(s: Setup) -> str:
    bits = [
        s.mode,
        f"batch {s.batch}" + (f" (x{s.grad_accumulation} accumulation)" if s.grad_accumulation > 1 else ""),
        f"seq {s.seq}" + (f" / decoder {s.decoder_seq}" if s.decoder_seq else ""),
        s.precision,
        s.optimizer_as_run,
        f"{s.attention} attention",
    ]
    if s.grad_checkpointing:
        bits.append("gradient checkpointing" + (" (reentrant)" if s.checkpoint_reentrant else ""))
    if not s.zero_grad_to_none:
        bits.append("gradients kept, zeroed, between steps (zero_grad without set_to_none)")
    if s.separate_lm_head:
        bits.append("built as transformers 4.x built it: separate lm_head" + (f" ({s.published_parameters:,} parameters, the published count)" if s.published_parameters else ""))
    if s.task:
        bits.append(f"task {s.task}" + (f" ({s.num_labels} labels)" if s.num_labels else ""))
    if s.mode == "lora":
        bits.append(f"LoRA r={s.lora_rank} alpha={s.lora_alpha} dropout={s.lora_dropout} on {s.lora_targets}")
    return ", ".join(bits)


def median_abs(values: list[float]) -> float | None:
    return statistics.median(abs(v) for v in values) if values else None


def write_doc(results: dict, help_text: str, path: Path) -> str:
    lines: list[str] = []
    add = lines.append
    env = results.get("_env", {})
    commits = {v.get("commit") for k, v in results.items() if not k.startswith("_") and v.get("commit")}
    add("# Published GPU measurements beside neurarch's")
    add("")
    add(
        "Public pages that report the GPU memory of a training run, reproduced with neurarch's memory simulator "
        "(fake tensors, CUDA kernel semantics, no weights read). Each row gives the source, the figure it quotes, "
        "what that figure measured, our figure for the same quantity, and the error (ours - quoted) / quoted."
    )
    add("")
    add(
        "**The CUDA side of neurarch is otherwise unmeasured here**: this workplace has no GPU, so these published "
        "figures are the only GPU measurements in this comparison; the simulator's own accuracy suite "
        "(docs/accuracy.md) measures real CPU steps."
    )
    add("")
    add(
        f"Regenerate: `nice -n 10 python benchmarks/published.py` (estimates cached in `benchmarks/published/estimates.json`; "
        f"`--recompute` runs everything again, `--doc-only` only rewrites this page). Last run: neurarch "
        f"{env.get('commit', '?')} ({', '.join(sorted(commits)) or '?'} for the rows below; each row's commit is in the cache), "
        f"{env.get('python', '')}, torch {env.get('torch', '?')}, transformers {env.get('transformers', '?')}, {env.get('date', '')}."
    )
    add("")
    add("How our figure is matched to the source's:")
    add("")
    add("* `max_memory_allocated` rows: ours is `memory.<mode>.peak_tensor_bytes` (the caching allocator rounds each block to 512 bytes on top, under 0.1 % here).")
    add(
        "* `nvidia-smi` rows (pynvml `memory.used`): ours is the simulated peak of rounded blocks, plus two cuBLAS workspaces "
        "of the source's card, plus the CUDA context **the source printed** (it replaces neurarch's own lazy-loading context "
        "of 287 MB). nvidia-smi also counts blocks the caching allocator keeps reserved but free (fragmentation), which "
        "neurarch does not simulate: these rows are expected to come out low by that much."
    )
    add("* The quoted figure is converted to bytes in the source's unit: `MB` printed as `used // 1024**2` is MiB; the peft README's `GB` is read as 1000 MiB (its scripts print MiB).")
    add("")

    comparable = []  # (row, err, exact)
    for src in SOURCES.values():
        rows = [r for r in ROWS if r.source == src.key]
        add(f"## {src.title}")
        add("")
        add(f"Source: [{src.title}]({src.url}), {src.section}. Measured: **{src.measured}**. GPU: {src.gpu}.")
        add("")
        add(f"Setup: {src.setup}")
        add("")
        add("| row | the source's run | quoted | quoted (bytes) | ours | error | every option the row needs exists in this neurarch? |")
        add("|---|---|---|---:|---:|---:|---|")
        for r in rows:
            est = results.get(r.id, {}).get("estimate")
            missing = results.get(r.id, {}).get("missing", [])
            if est is None:
                q = quoted_bytes(r)
                add(f"| {r.id} | {r.label} | {r.quoted_text} | {'—' if q is None else f'{q:,}'} | not run | — | — |")
                continue
            if "error" in est:
                add(f"| {r.id} | {r.label} | {r.quoted_text} | — | failed: {est['error'][:160]} | — | — |")
                continue
            our = ours(r, est)
            how = "yes" if not missing else "no: " + "; ".join(m.split(" (")[0] for m in missing) + " missing"
            if r.quoted is None:
                verdict = (
                    f"OOM agrees (ours {our / 2**30:,.1f} GiB > {r.oom_on_bytes / 2**30:.0f} GiB)"
                    if our > r.oom_on_bytes
                    else f"ours {our / 2**30:,.1f} GiB fits {r.oom_on_bytes / 2**30:.0f} GiB: disagrees"
                )
                add(f"| {r.id} | {r.label} | {r.quoted_text} | — | {fmt_gb(our)} | {verdict} | {how} |")
                continue
            err = error(r, est)
            comparable.append((r, err, not missing))
            q = quoted_bytes(r)
            add(f"| {r.id} | {r.label} | {r.quoted_text} | {q:,} | {our:,} | {fmt_pct(err)} | {how} |")
        add("")
        add("Each row's full setup, as data (what neurarch was asked, what it could not be asked, and where the source is unclear):")
        add("")
        for r in rows:
            entry = results.get(r.id, {})
            add(f"* **{r.id}**: {setup_text(r.setup)}.")
            if entry.get("command"):
                cmd = [a.replace(str(ROOT) + "/", "") for a in entry["command"] if a != LIBRARY]
                if LIBRARY in entry["command"]:
                    add(f"  Options (as `neurarch-trace {' '.join(cmd)}` would take them; the model built as transformers 4.x built it, separate lm_head, and simulated through the library).")
                else:
                    add(f"  Command: `neurarch-trace {' '.join(cmd)}`.")
            for m in entry.get("missing", []):
                add(f"  Option not in this neurarch yet: {m}.")
            for u in r.unclear:
                add(f"  Unclear in the source: {u}.")
            est = entry.get("estimate") or {}
            if est and "error" not in est:
                b = est["breakdown"]
                add(
                    f"  Ours at the peak ({est['phase']}, {est['module']}): weights {fmt_gb(b.get('weights'))}, gradients "
                    f"{fmt_gb(b.get('gradients'))}, optimizer {fmt_gb(b.get('optimizer'))}, activations {fmt_gb(b.get('activations'))}, "
                    f"temporary {fmt_gb(b.get('temporary'))}; {est['parameters']:,} parameters ({est['trainable_parameters']:,} "
                    f"trained); simulated in {est['seconds']:.0f} s."
                )
        add("")

    add("## Summary")
    add("")
    for measured, target in (("max_memory_allocated", 0.05), ("nvidia-smi", 0.10)):
        rows_m = [(r, e) for r, e, _ in comparable if SOURCES[r.source].measured == measured]
        exact = [e for r, e, ok in comparable if ok and SOURCES[r.source].measured == measured]
        allm = median_abs([e for _, e in rows_m])
        exm = median_abs(exact)
        add(
            f"* **{measured}** rows (target: median |error| <= {target * 100:.0f} %): {len(rows_m)} rows, median |error| "
            f"{'—' if allm is None else f'{allm * 100:.1f} %'} ({len(exact)} of them ran with every CLI option their setup needs, "
            f"median |error| {'—' if exm is None else f'{exm * 100:.1f} %'}; the parts no option expresses are listed per row)."
        )
    ooms = [(r, results.get(r.id, {}).get("estimate")) for r in ROWS if r.quoted is None]
    agree = sum(1 for r, est in ooms if est and "error" not in est and ours(r, est) > r.oom_on_bytes)
    add(f"* Runs the source reports out of memory: ours agrees on {agree} of {len(ooms)}.")
    add("")
    path.parent.mkdir(parents=True, exist_ok=True)
    extra = HERE / "analysis.md"
    if extra.exists():  # the hand-written findings (why rows are off), kept beside the generated tables
        lines += ["", extra.read_text().rstrip(), ""]
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


# --------------------------------------------------------------------------


def environment() -> dict:
    import torch
    import transformers

    return {"commit": git_commit(), "python": f"Python {platform.python_version()}", "torch": torch.__version__, "transformers": transformers.__version__, "date": _dt.date.today().isoformat()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated row ids")
    ap.add_argument("--recompute", action="store_true", help="ignore cached estimates")
    ap.add_argument("--doc-only", action="store_true", help="write the doc from the cache, run nothing")
    ap.add_argument("--timeout", type=int, default=3000, help="seconds per row (default 3000)")
    ap.add_argument("--out", type=Path, default=DOC)
    args = ap.parse_args(argv)

    known = {r.id for r in ROWS}
    only = set(args.only.split(",")) if args.only else None
    if only and not only <= known:
        print(f"unknown row id(s): {', '.join(sorted(only - known))}; known: {', '.join(sorted(known))}", file=sys.stderr)
        return 2
    cache = json.loads(CACHE.read_text()) if CACHE.exists() else {}
    help_text = cli_help()
    env = environment()
    if not args.doc_only:
        for row in ROWS:
            if only and row.id not in only:
                continue
            argv_row, missing = command(row, help_text)
            if row.setup.separate_lm_head:
                argv_row = [*argv_row, LIBRARY]
            old = cache.get(row.id, {})
            stored = [a.replace("{configs}", str(CONFIGS)) for a in old.get("command", [])]
            # reuse while the command line is unchanged and it gave a figure (a failed row is tried again)
            if not args.recompute and stored == argv_row and "error" not in old.get("estimate", {"error": ""}):
                continue
            print(f"[{row.id}] neurarch-trace {' '.join(argv_row)}", file=sys.stderr, flush=True)
            if row.setup.separate_lm_head:
                try:
                    est = run_library(row, argv_row)
                except Exception as e:  # noqa: BLE001 - a row that fails is reported, not fatal
                    est = {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}", "seconds": 0}
            else:
                est = run_row(row, argv_row, args.timeout)
            print(f"[{row.id}] {'error: ' + est['error'] if 'error' in est else 'ok'} ({est['seconds']} s)", file=sys.stderr, flush=True)
            cache[row.id] = {
                "command": [a.replace(str(CONFIGS), "{configs}") for a in argv_row],
                "missing": missing,
                "commit": env["commit"],
                "ran": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "estimate": est,
            }
            cache["_env"] = env
            CACHE.write_text(json.dumps(cache, indent=1, sort_keys=True) + "\n")
    cache.pop("_what_ifs", None)  # the earlier what-ifs (decoder length, separate head) are the rows' own setups now
    if not args.doc_only:
        CACHE.write_text(json.dumps(cache, indent=1, sort_keys=True) + "\n")
    view = {k: ({**v, "command": [a.replace("{configs}", str(CONFIGS)) for a in v.get("command", [])]} if not k.startswith("_") else v) for k, v in cache.items()}
    write_doc(view, help_text, args.out)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
