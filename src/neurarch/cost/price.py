"""Roofline pricing of a counted training step: step time, run hours and dollars per card.

Nothing here imports torch: a plan whose op counts are already known (the
warm report cache, :mod:`neurarch.warm`) prices other cards, prices and epochs
with this module alone.  The counting itself is :mod:`.estimate`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable

from ..cards import Card
from ..report.cost import CostAssumptions, CostCard, CostHeadline, CostSection


@dataclass
class OpRecord:
    op: str  # e.g. "aten.mm"
    phase: str  # "forward" or "backward"
    flops: int
    bytes: int  # read + written, at the precision's element size
    matmul: bool  # has a FLOP formula: runs on tensor cores
    causal: bool = False
    weight_grad: bool = False  # backward matmul whose output is a weight's gradient (skipped when the weight is frozen)


# Achievable fractions of peak, measured on an NVIDIA H200 in this project's
# device notes (2026-10-28): an 8192^3 bf16 matmul through PyTorch ran at
# 788 TFLOP/s of the 989 dense peak (0.80), a device-to-device copy moved
# 4.3 TB/s of the 4.8 TB/s datasheet bandwidth (0.90).  Applied to every card:
# an assumption, documented in the report.
COMPUTE_EFFICIENCY = 0.80
BANDWIDTH_EFFICIENCY = 0.90
# CUDA kernel launch overhead per operator: ~4 us is the commonly measured
# cost of a kernel launch on current drivers (NVIDIA CUDA C++ Best Practices
# Guide discusses launch overhead; microbenchmarks report 3-5 us).
LAUNCH_SECONDS = 4e-6
# AdamW step bytes per trainable parameter: read param, grad, exp_avg,
# exp_avg_sq (4 x 4 B), write param, exp_avg, exp_avg_sq (3 x 4 B) = 28 B.
ADAMW_BYTES_PER_PARAM = 28


@dataclass
class StepWork:
    """Per-op FLOPs and bytes at batch 2 and 3 (for the affine extrapolation).

    ``weights`` (one per op, default 1) say how many times an op counts: a deep
    model is counted cut to 2 and 3 repeats of its layer stack, and a sum over
    ops at n repeats is (3 - n) x the 2-repeat run's + (n - 2) x the 3-repeat
    run's, exactly (each repeat runs the same ops).
    """

    ops1: list[OpRecord]
    ops2: list[OpRecord]
    unknown: set[str]
    weights: list[float] | None = None
    method: str = "traced whole"

    def at(self, batch: int, frozen: bool = False) -> list[tuple[float, float, bool, bool, float]]:
        """(flops, bytes, matmul, causal, weight) of each op at this batch.

        ``frozen``: the step of a frozen base (LoRA, QLoRA): backward skips the
        frozen weights' gradient matmuls (an op flagged at both batches)."""
        k = batch - 2
        weights = self.weights or [1.0] * len(self.ops1)
        return [
            (a.flops + (b.flops - a.flops) * k, a.bytes + (b.bytes - a.bytes) * k, a.matmul, a.causal, w)
            for a, b, w in zip(self.ops1, self.ops2, weights)
            if not (frozen and a.weight_grad and b.weight_grad)
        ]

    def flops(self, batch: int, frozen: bool = False) -> float:
        return sum(f * w for f, _, _, _, w in self.at(batch, frozen))


_RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(OpRecord))


def encode_work(w: StepWork) -> dict:
    rows = lambda ops: [[getattr(r, f) for f in _RECORD_FIELDS] for r in ops]  # noqa: E731
    return {"ops1": rows(w.ops1), "ops2": rows(w.ops2), "unknown": sorted(w.unknown), "weights": w.weights, "method": w.method}


def decode_work(raw: dict) -> StepWork:
    ops = lambda rows: [OpRecord(**dict(zip(_RECORD_FIELDS, r))) for r in rows]  # noqa: E731
    return StepWork(ops(raw["ops1"]), ops(raw["ops2"]), set(raw["unknown"]), weights=raw["weights"], method=raw["method"])


def _peak_flops(card: Card, precision: str) -> float | None:
    if precision == "fp32":
        return card.fp32_tflops * 1e12 if card.fp32_tflops else None
    if precision in ("bf16-mixed", "bf16") and not card.bf16:
        return None
    return card.dense_bf16_tflops * 1e12 if card.dense_bf16_tflops else None


def step_time(work: StepWork, batch: int, card: Card, precision: str, trainable: int, frozen: bool = False) -> tuple[float, float, str] | None:
    """(seconds, share of time in compute-bound ops, 'compute'|'memory') or None if the card lacks data.

    ``frozen``: a LoRA/QLoRA step (the frozen weights' gradient matmuls are
    skipped; ``trainable`` is then the adapters')."""
    peak = _peak_flops(card, precision)
    if peak is None or not card.bandwidth_gb_s:
        return None
    flops_rate = peak * COMPUTE_EFFICIENCY
    bw = card.bandwidth_gb_s * 1e9 * BANDWIDTH_EFFICIENCY
    total = compute_time = 0.0
    for flops, nbytes, _matmul, causal, weight in work.at(batch, frozen):
        t_c = flops / flops_rate * (0.5 if causal else 1.0)  # causal kernels skip the masked half
        t_m = nbytes / bw
        t = (max(t_c, t_m) + LAUNCH_SECONDS) * weight
        total += t
        if t_c > t_m:
            compute_time += t
    total += trainable * ADAMW_BYTES_PER_PARAM / bw
    share = compute_time / total if total else 0.0
    return total, share, "compute" if share >= 0.5 else "memory"


# FSDP (ZeRO-3) moves each weight three times a step over the card-to-card link:
# all-gathered for forward and again for backward, its gradient reduce-scattered;
# a ring collective sends (N-1)/N of the bytes per card, in one direction of the
# link.  FSDP prefetches the next layer's weights while the current one computes,
# so the step takes the longer of compute and communication (no measured overlap
# efficiency: an assumption, stated in the report).
FSDP_TRANSFERS = 3
_NAMES = {"lora": "LoRA", "qlora": "QLoRA", "full": "full fine-tuning"}


def fsdp_comm_seconds(param_bytes: int, gpus: int, card: Card) -> float | None:
    if not card.interconnect_gb_s or gpus < 2:
        return None if gpus >= 2 else 0.0
    one_way = card.interconnect_gb_s / 2 * 1e9 * BANDWIDTH_EFFICIENCY
    return FSDP_TRANSFERS * param_bytes * (gpus - 1) / gpus / one_way


@dataclass
class Run:
    """One run the memory plan says a card can make."""

    mode: str = "full"
    gpus: int = 1
    batch: int | None = None  # per card; None: not checked against memory
    fits: bool | None = None
    note: str | None = None
    trainable: int | None = None  # the mode's trainable parameters (LoRA: the adapters)


def runs_for(card: Card, batch: int, fits: dict[str, int] | None, fsdp: tuple[int, int | None] | None, trainable: dict[str, int]) -> list[Run]:
    """What a user can run on ``card`` at ``batch`` per the memory plan's largest batches.

    Full fine-tuning where one card holds it; where it does not, the LoRA (else
    QLoRA) run on one card and the FSDP run on N cards.  Without a plan: the
    batch asked for, unchecked.  With only inference simulated: capped at the
    serving batch, an upper bound for training."""
    if fits is None:
        return [Run(batch=batch)]
    runs: list[Run] = []

    def one(mode: str, gpus: int = 1, most: int | None = None, note: str | None = None):
        b = min(batch, most) if most else batch
        if most is not None and b < batch:
            note = (note + "; " if note else "") + f"batch {batch} does not fit; using the largest that does, {b}"
        runs.append(Run(mode=mode, gpus=gpus, batch=b, fits=True, note=note, trainable=trainable.get(mode)))

    full = fits.get("full")
    if full:
        one("full", most=full)
        return runs
    adapters = next((m for m in ("lora", "qlora") if fits.get(m)), None)
    if full == 0:
        if adapters:
            one(adapters, most=fits[adapters], note=f"full fine-tuning does not fit one {card.name}; {_NAMES[adapters]} does")
        if fsdp is not None and fsdp[0] > 0:
            one("full", gpus=fsdp[0], most=fsdp[1], note=f"full fine-tuning with FSDP over {fsdp[0]} x {card.name}")
        if not runs:
            why = "batch 1 of full fine-tuning does not fit this card"
            why += "" if "lora" not in fits and "qlora" not in fits else ", nor LoRA/QLoRA"
            why += "" if fsdp is None else "; no number of these cards holds it under FSDP"
            runs.append(Run(batch=0, fits=False, note=why))
        return runs
    # full fine-tuning was not simulated (--modes)
    if adapters:
        one(adapters, most=fits[adapters], note="full fine-tuning not simulated (--modes)")
        return runs
    if any(fits.get(m) == 0 for m in ("lora", "qlora")):
        return [Run(batch=0, fits=False, note="batch 1 of LoRA/QLoRA does not fit this card")]
    serve = fits.get("inference")
    if serve == 0:
        return [Run(batch=0, fits=False, note="batch 1 does not fit this card even for inference")]
    note = "no training mode simulated (--modes): the batch is not checked against training memory"
    if serve:
        note += f"; capped at the largest inference batch, {serve}, an upper bound (training needs more)"
    return [Run(batch=min(batch, serve) if serve else batch, note=note)]


def estimate(
    work: StepWork,
    cards: list[Card],
    *,
    precision: str,
    epochs: int,
    samples: int | None,
    tokens: int | None,
    seq_len: int | None,
    batch: int | None,
    trainable: int,
    headline_card: str,
    fits: Callable[[Card], dict[str, int] | None] | None = None,
    fsdp: Callable[[Card], tuple[int, int | None] | None] | None = None,
    trainable_by_mode: dict[str, int] | None = None,
    param_bytes: int = 0,
    grad_accumulation: int = 1,
) -> CostSection:
    """Cost of a run on each card.  ``fits(card)`` (from the memory plan) gives the
    largest batch per mode, ``fsdp(card)`` the FSDP plan (cards, batch per card)."""
    flops_per_sample = work.flops(1)
    rows: list[CostCard] = []
    by_mode = {"full": trainable, **(trainable_by_mode or {})}
    used_fsdp: set[str] = set()
    for card in cards:
        for run in runs_for(card, batch or 32, fits(card) if fits else None, fsdp(card) if fsdp else None, by_mode):
            if run.fits is False:
                rows.append(CostCard(name=card.name, mode=run.mode, gpus=run.gpus, batch=0, fits=False, note=run.note))
                continue
            b = run.batch
            assert b is not None  # a run that fits (or may) has its batch
            frozen = run.mode in ("lora", "qlora")
            n_train = run.trainable if run.trainable is not None else trainable
            # One micro-batch's forward and backward; the optimizer step once per grad_accumulation of them.
            t = step_time(work, b, card, precision, n_train // (run.gpus * grad_accumulation), frozen)
            if t is None:
                why = "no bf16 support" if precision in ("bf16-mixed", "bf16") and not card.bf16 else "no rate or bandwidth data"
                rows.append(CostCard(name=card.name, mode=run.mode, gpus=run.gpus, batch=b, fits=run.fits, note=why))
                continue
            seconds, share, bound = t
            note = run.note
            if run.gpus > 1:
                comm = fsdp_comm_seconds(param_bytes, run.gpus, card)
                if comm is None:
                    rows.append(CostCard(name=card.name, mode=run.mode, gpus=run.gpus, batch=b, fits=True, note=(note or "") + "; no interconnect figure for this card"))
                    continue
                used_fsdp.add(card.name)
                if comm > seconds:
                    note = f"{note}; communication-bound: {comm:.3g} s of weight traffic a step over {seconds:.3g} s of compute"
                    bound = "memory"
                seconds = max(seconds, comm)
            global_batch = b * run.gpus
            if tokens is not None:
                steps = math.ceil(epochs * tokens / (global_batch * (seq_len or 1)))
            else:
                steps = math.ceil(epochs * (samples or 0) / global_batch)
            hours = steps * seconds / 3600
            peak = _peak_flops(card, precision) or 0
            mfu = work.flops(b, frozen) / (seconds * peak) if peak else None
            rows.append(
                CostCard(
                    name=card.name,
                    mode=run.mode,
                    gpus=run.gpus,
                    batch=b,
                    fits=run.fits,
                    step_seconds=seconds,
                    steps=steps,
                    run_hours=hours,
                    usd=hours * card.usd_per_hour * run.gpus if card.usd_per_hour is not None else None,
                    mfu=mfu,
                    bound=bound,
                    compute_bound_share=share,
                    note=note,
                )
            )
    priced = [r for r in rows if r.usd is not None and r.fits is not False]
    timed = [r for r in rows if r.run_hours is not None and r.fits is not False]
    cheap = min(priced, key=lambda r: r.usd or 0.0) if priced else None  # priced: usd is set
    fast = min(timed, key=lambda r: r.run_hours or 0.0) if timed else None  # timed: run_hours is set
    cheapest, fastest = (cheap.name if cheap else None), (fast.name if fast else None)
    for r in rows:
        r.cheapest = r is cheap
        r.fastest = r is fast
    head = next((r for r in rows if r.name == headline_card and r.usd is not None), None) or next((r for r in rows if r.name == headline_card), None)
    pricing = "per card, the batch asked for where the memory plan says it fits, else the largest that does" if fits else "the batch asked for, not checked against memory (no --plan)"
    if any(r.mode != "full" for r in rows):
        pricing += "; where full fine-tuning fits no single card, the LoRA (else QLoRA) run on one card, whose backward skips the frozen weights' gradient matmuls"
    if any(r.gpus > 1 for r in rows):
        pricing += "; and the FSDP run on the fewest cards that hold it (usd for all of them)"
    links = sorted({f"{c.name}: {c.interconnect_gb_s:g} GB/s, {c.interconnect_source}" for c in cards if c.name in used_fsdp})
    interconnect = (
        (
            "FSDP: each weight crosses the card-to-card link 3 times a step (all-gather for forward and backward, "
            "reduce-scatter of its gradient), (N-1)/N of it per card in one direction (half the datasheet's "
            "bidirectional figure, at the same 0.90 efficiency as memory bandwidth); the step takes the longer of "
            "compute and that traffic (FSDP prefetches the next layer while one computes). Links: " + "; ".join(links)
        )
        if links
        else ""
    )
    return CostSection(
        assumptions=CostAssumptions(
            epochs=epochs,
            samples=samples,
            tokens=tokens,
            batch=batch or 32,
            precision=precision,
            seq_len=seq_len,
            compute_efficiency=COMPUTE_EFFICIENCY,
            bandwidth_efficiency=BANDWIDTH_EFFICIENCY,
            launch_seconds=LAUNCH_SECONDS,
            optimizer="adamw (28 bytes per trainable parameter per step)",
            work_method=work.method,
            pricing=pricing,
            interconnect=interconnect,
            sources=(
                "achievable fractions measured on an H200 (bf16 matmul 788 of 989 TFLOP/s; copy 4.3 of 4.8 TB/s) and "
                "applied to every card; card rates, bandwidths and prices from neurarch/data/cards.tsv with their sources"
            ),
        ),
        flops_per_sample=int(flops_per_sample),
        flops_per_token=int(flops_per_sample / seq_len) if tokens is not None and seq_len else None,
        cards=rows,
        headline=CostHeadline(
            card=headline_card,
            usd=head.usd if head else None,
            run_hours=head.run_hours if head else None,
            batch=head.batch if head else None,
            mode=head.mode if head else None,
            gpus=head.gpus if head else None,
        ),
        cheapest=cheapest,
        fastest=fastest,
        ops_without_formula=sorted(work.unknown),
    )
