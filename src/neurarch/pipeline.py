"""The pipeline, top to bottom: source -> build -> trace -> report.

``analyze("microsoft/resnet-50")`` is the whole of ``neurarch-trace`` minus
rendering.  Later stages (memory plan, cost, verifier) add sections to the
same :class:`~neurarch.report.Report`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass, field

from . import __version__
from .build import build
from .errors import TraceTimeout
from .inputs import InputOptions, plan_inputs
from .report import InputInfo, InputTensor, ModelInfo, PassResult, Report
from .sources import resolve
from .trace import trace
from .trace.counts import build_params
from .trace.structure import build_structure

DEFAULT_TIMEOUT_S = 300
DEFAULT_PLAN_TIMEOUT_S = 1200  # --plan simulates several modes and batches


@dataclass
class CostOptions:
    """A training run to price (``--cost`` / ``--plan``)."""

    epochs: int = 10
    samples: int | None = None  # per epoch; default 50,000 when tokens is None
    tokens: int | None = None  # per epoch, for language models
    batch: int | None = None  # default 32, or the largest that fits
    precision: str = "bf16-mixed"
    card: str = "A10G"  # the headline card
    cards: list = field(default_factory=list)  # extra cards (custom NAME:GB or built-in names)
    prices: dict = field(default_factory=dict)  # card name -> USD per hour override

    def validate(self) -> None:
        from .cost import PRECISIONS
        from .errors import InputError

        for name in ("epochs", "samples", "tokens", "batch"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v <= 0):
                raise InputError(f"--{name} must be a positive integer, got {v}")
        if self.epochs > 100_000 or (self.samples or 0) > 10**13 or (self.tokens or 0) > 10**16:
            raise InputError("--epochs/--samples/--tokens are beyond neurarch's limits (1e5 epochs, 1e13 samples, 1e16 tokens)")
        if self.precision not in PRECISIONS:
            raise InputError(f"unknown --precision {self.precision!r}; choose one of {', '.join(PRECISIONS)}")


@dataclass
class PlanOptions:
    """The memory plan (``--plan``): which modes, and how the run is set up."""

    modes: tuple = ("full", "lora", "qlora", "inference")
    optimizer: str = "adamw"
    lora_rank: int = 16
    grad_checkpointing: bool = False
    headroom: float = 1.15
    context_len: int | None = None  # inference KV cache length (default: the input's)

    def validate(self) -> None:
        from .errors import InputError
        from .plan.step import MODES, OPTIMIZERS

        bad = [m for m in self.modes if m not in MODES]
        if bad or not self.modes:
            raise InputError(f"unknown --modes {','.join(bad) or '(none)'}; choose from {', '.join(MODES)}")
        if self.optimizer not in OPTIMIZERS:
            raise InputError(f"unknown --optimizer {self.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
        if not isinstance(self.lora_rank, int) or not 1 <= self.lora_rank <= 4096:
            raise InputError(f"--lora-rank must be an integer from 1 to 4096, got {self.lora_rank}")
        if not (1.0 <= self.headroom <= 10.0):
            raise InputError(f"--headroom must be between 1 and 10, got {self.headroom}")
        if self.context_len is not None and not 1 <= self.context_len <= (1 << 22):
            raise InputError(f"--context-len must be between 1 and {1 << 22:,}, got {self.context_len}")


@dataclass
class Options:
    """Everything that changes a report (the CLI flags, as one object)."""

    inputs: InputOptions = field(default_factory=InputOptions)
    depth: int | None = None
    revision: str | None = None
    trust_remote_code: bool = False
    offline: bool | None = None  # None: follow HF_HUB_OFFLINE
    backward: bool = True
    timeout_s: float | None = None  # None: 300 s, or 1200 s with a plan
    cost: CostOptions | None = None  # price a training run
    plan: PlanOptions | None = None  # simulate memory per mode and fit every card
    precision: str = "bf16-mixed"  # training precision the plan and the verifier assume
    from_scratch: bool = False  # training from scratch (init rules apply) rather than fine-tuning
    disable: set = field(default_factory=set)  # verifier rule ids turned off
    verify: bool = True


@contextlib.contextmanager
def _time_limit(seconds: float | None, what: str):
    """Raise TraceTimeout after ``seconds`` (main thread only; elsewhere no limit)."""
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
        yield
        return

    message = f"{what} took longer than {seconds:g} s (raise the limit with --timeout)"
    fired = []

    def on_alarm(signum, frame):
        fired.append(True)
        raise TraceTimeout(message)

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    if fired:  # the trace catches a failing forward pass as a result; a timeout is not one
        raise TraceTimeout(message)


class _ListHandler(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        msg = record.getMessage().strip().splitlines()
        if msg and msg[0] not in self.messages:
            self.messages.append(msg[0])


@contextlib.contextmanager
def _library_logs():
    """Collect the warnings transformers logs while building (they become report notes)."""
    from transformers.utils import logging as hf_logging

    logger = hf_logging.get_logger("transformers")  # also installs transformers' own handler first
    handler = _ListHandler()
    saved = (logger.handlers[:], logger.level, logger.propagate)
    logger.handlers = [handler]
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    # FakeTensorMode logs a full traceback at ERROR when an op fails; the
    # failure is reported in forward_pass.error, so keep stderr to one line.
    fake_logger = logging.getLogger("torch._subclasses.fake_tensor")
    fake_level = fake_logger.level
    fake_logger.setLevel(logging.CRITICAL)
    # bitsandbytes warns that an optional CPU kernel package is missing; it falls back by itself.
    bnb_logger = logging.getLogger("bitsandbytes")
    bnb_level = bnb_logger.level
    bnb_logger.setLevel(logging.ERROR)
    try:
        yield handler.messages
    finally:
        logger.handlers, level, logger.propagate = saved[0], saved[1], saved[2]
        logger.setLevel(level)
        fake_logger.setLevel(fake_level)
        bnb_logger.setLevel(bnb_level)


def _cards(c: CostOptions):
    """The cards to price: every built-in card, plus custom ones, prices overridden."""
    from .cards import builtin_cards, find, parse_card, with_price

    cards = list(builtin_cards())
    for spec in c.cards:
        card = parse_card(spec)
        cards = [x for x in cards if x.name != card.name] + [card]
    names = {x.name for x in cards}
    head = c.card if c.card in names else find(c.card).name
    c.card = head
    for name, price in c.prices.items():
        target = name if name in names else find(name).name
        cards = [with_price(x, price) if x.name == target else x for x in cards]
    return cards


# --------------------------------------------------------------------------
# Plan and cost: independent jobs, run side by side where the OS can fork
# --------------------------------------------------------------------------

_JOBS: dict | None = None  # name -> callable, read by forked workers


def _child_init() -> None:
    import torch

    torch.set_num_threads(1)


def _call_job(name: str):
    try:
        return name, True, _JOBS[name]()
    except BaseException as e:  # noqa: BLE001 - carried to the parent as a value
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return name, False, (type(e).__name__, msg)


def run_jobs(jobs: dict, workers: int | None = None) -> dict:
    """``{name: (ok, value or (error type, message))}`` for each job.

    The jobs (one per memory mode, plus the cost count) only read the traced
    model, so on Linux they run in forked processes, one per CPU core: a
    forked child sees the model as it is, and returns plain results.
    Elsewhere, or with one core, they run one after another.
    ``NEURARCH_JOBS=N`` caps the workers (1: no worker processes).
    """
    global _JOBS
    names = list(jobs)
    if workers is None:
        env = os.environ.get("NEURARCH_JOBS", "").strip()
        want = int(env) if env.isdigit() and int(env) > 0 else (os.cpu_count() or 1)
        workers = min(len(names), want)
    if workers <= 1 or len(names) <= 1 or sys.platform != "linux":
        _JOBS = jobs
        try:
            return {n: (ok, v) for n, ok, v in map(_call_job, names)}
        finally:
            _JOBS = None
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    _JOBS = jobs
    out: dict = {}
    try:
        # A worker that dies (killed, out of memory) breaks the pool: its jobs become errors, never a hang.
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"), initializer=_child_init) as pool:
            futures = {pool.submit(_call_job, n): n for n in names}
            for fut, n in futures.items():
                try:
                    _, ok, v = fut.result()
                except BrokenProcessPool:
                    ok, v = False, ("WorkerCrash", "the worker process simulating this died (out of memory?)")
                out[n] = (ok, v)
    finally:
        _JOBS = None
    return out


def _mode_job(built, plan, opts: Options, cards, mode: str, largest_layer_bytes: int = 0) -> dict:
    """One memory mode: its figures at the input batch, each card's largest batch,
    and for full fine-tuning, where a card cannot hold batch 1, the pipeline and
    FSDP plans (from the simulations at batch 1 and 2)."""
    from .plan.fit import card_batch
    from .plan.memory import estimate_with_curve, with_batch

    p = opts.plan
    cache: dict = {}

    def at(b):
        if b not in cache:
            # Only the input batch is reported in full (first step too); the
            # batch search needs the steady state alone (half the work).
            cache[b] = estimate_with_curve(
                built, with_batch(plan, b), mode, precision=opts.precision, optimizer=p.optimizer,
                grad_checkpointing=p.grad_checkpointing, lora_rank=p.lora_rank, context_len=p.context_len,
                steady_only=b != plan.batch,
            )
        return cache[b]

    out = {"memory": at(plan.batch)[0], "fits": {}}
    for card in cards or []:
        out["fits"][card.name] = card_batch(at, card, mode, p.headroom)
    if mode == "full" and any(b == 0 for b, _ in out["fits"].values()):
        from .plan.fit import fsdp_plans, pipeline_plans

        one, c1 = at(1)
        out["multi"] = pipeline_plans(cards, "full", c1.segments if c1 else None,
                                      one.breakdown.overhead + (0 if one.phase == "optimizer" else one.breakdown.temporary),
                                      one.peak_bytes, p.headroom)
        out["multi"] += fsdp_plans(cards, "full", c1, at(2)[1], largest_layer_bytes, p.headroom)
    return out


def _memory_and_work(built, plan, opts: Options, cards, structure, source):
    """memory.<mode> at the input batch, each card's largest batch per mode, FSDP
    plans, and the cost's per-op work (counted alongside)."""
    from .plan.fit import CardFit
    from .plan.schema import MemoryAssumptions, MemorySection

    p = opts.plan
    jobs = {}
    elem = 4 if opts.precision == "fp32" else 2
    largest = max((n.parameters for n in structure.nodes), default=0) * elem
    if p is not None:
        for mode in p.modes:
            jobs[mode] = lambda mode=mode: _mode_job(built, plan, opts, cards, mode, largest)
    if opts.cost is not None:
        from .cost import count_step

        jobs["cost"] = lambda: count_step(built.model, built.config, opts.inputs, opts.cost.precision, source.default_input_shape)
    # The slowest first, so two workers finish together.
    order = [n for n in ("lora", "qlora", "full", "cost", "inference") if n in jobs]
    results = run_jobs({n: jobs[n] for n in order})
    work = None
    if "cost" in results:
        ok, value = results["cost"]
        if not ok:
            raise RuntimeError(f"counting the step's work failed: {value[0]}: {value[1]}")
        work = value
    if p is None:
        return None, [], [], work
    section = MemorySection(
        assumptions=MemoryAssumptions(
            precision=opts.precision,
            optimizer=p.optimizer,
            lora_rank=p.lora_rank,
            grad_checkpointing=p.grad_checkpointing,
            headroom=p.headroom,
            batch=plan.batch,
            context_len=p.context_len,
            method="training steps simulated on fake tensors (steady state: step 2), CUDA kernel semantics; "
            "peak_bytes adds caching-allocator rounding and fixed CUDA overhead",
        )
    )
    fits = [CardFit.for_card(c) for c in cards or []]
    full = None
    for mode in p.modes:
        ok, value = results[mode]
        if not ok:  # a mode that does not apply or cannot run is a result, not a crash
            section.errors[mode] = value[1][:300]
            continue
        setattr(section, mode, value["memory"])
        for fit in fits:
            fit.max_batch[mode], fit.checked[mode] = value["fits"][fit.name]
        if mode == "full":
            full = value
    multi = full.get("multi", []) if full is not None else []
    return section, fits, multi, work


def _cost(work, opts: Options, plan, trainable: int, cards, full_fits=None):
    from .cost import estimate

    c = opts.cost
    tokens = c.tokens
    samples = c.samples if c.samples is not None else (None if tokens is not None else 50_000)
    return estimate(
        work,
        cards,
        precision=c.precision,
        epochs=c.epochs,
        samples=samples,
        tokens=tokens,
        seq_len=plan.seq_len,
        batch=c.batch,
        trainable=trainable,
        headline_card=c.card,
        max_batch=(lambda card: full_fits.get(card.name)) if full_fits else None,
    )


def analyze(spec: str, options: Options | None = None) -> Report:
    """Resolve, build and trace a model; return its report."""
    opts = options or Options()
    opts.inputs.validate()
    cards = None
    if opts.plan is not None:
        opts.plan.validate()
        if opts.cost is None:
            opts.cost = CostOptions(precision=opts.precision)
    if opts.cost is not None:
        opts.cost.validate()
        cards = _cards(opts.cost)
    source = resolve(spec, revision=opts.revision, trust_remote_code=opts.trust_remote_code, offline=opts.offline)
    timeout = opts.timeout_s if opts.timeout_s is not None else (DEFAULT_PLAN_TIMEOUT_S if opts.plan is not None else DEFAULT_TIMEOUT_S)
    with _time_limit(timeout, f"tracing {source.id}"), _library_logs() as library_warnings:
        built = build(source)
        plan = plan_inputs(built.model, built.config, opts.inputs, source.default_input_shape)
        result = trace(built.model, plan, backward=opts.backward)
        params = build_params(built.model, source.checkpoint, built.config)
        structure = build_structure(built.model, result.recorder.events, opts.depth, result.unused_parameters)
        cost = memory = None
        fits: list = []
        multi: list = []
        traced = result.forward.ok and result.backward is not None and result.backward.ok
        if (opts.plan is not None or opts.cost is not None) and traced:
            memory, fits, multi, work = _memory_and_work(built, plan, opts, cards, structure, source)
            if opts.cost is not None:
                full = {f.name: f.max_batch.get("full") for f in fits} if fits and "full" in opts.plan.modes else None
                cost = _cost(work, opts, plan, params.trainable, cards, full)

    warnings = []
    if source.checkpoint is None:
        warnings.append("no checkpoint was read: the published scalar count is unknown, derived is the graph's own count")
    elif params.delta and not params.explained:
        warnings.append(f"derived differs from the checkpoint by {params.delta:+,} scalars and neurarch cannot explain it")

    def outcome(o):
        return None if o is None else PassResult(ok=o.ok, error=o.error, module=o.module, seconds=round(o.seconds, 3))

    report = Report(
        tool=f"neurarch {__version__}",
        model=ModelInfo(
            id=source.id,
            source=source.kind,
            provenance=source.provenance,
            architecture=built.architecture,
            model_class=built.model_class,
            model_type=built.model_type,
            library=built.library,
            revision=source.revision,
            notes=[*source.notes, *built.notes, *(f"transformers says: {w}" for w in library_warnings)],
        ),
        input=InputInfo(
            shape=list(plan.main_shape),
            batch=plan.batch,
            seq_len=plan.seq_len,
            image_size=list(plan.image_size) if plan.image_size else None,
            tensors=[InputTensor(name=t.name, shape=list(t.shape), dtype=str(t.dtype).replace("torch.", "")) for t in plan.tensors],
            how="; ".join(plan.how),
        ),
        forward_pass=outcome(result.forward),
        backward_pass=outcome(result.backward),
        params=params,
        structure=structure,
        memory=memory,
        cards=fits,
        multi_gpu=multi,
        cost=cost,
        warnings=warnings,
    )
    if opts.verify:
        from . import verify

        ctx = verify.CheckContext(
            report=report,
            model=built.model,
            config=built.config,
            from_scratch=opts.from_scratch,
            training=True,
            precision=opts.precision,
        )
        result = verify.run(ctx, opts.disable)
        report.findings = result.findings
        report.verifier = result.verifier
    return report
