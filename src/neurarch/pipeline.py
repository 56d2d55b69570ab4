"""The pipeline, top to bottom: source -> build -> trace -> report.

``analyze("microsoft/resnet-50")`` is the whole of ``neurarch-trace`` minus
rendering.  Later stages (memory plan, cost, verifier) add sections to the
same :class:`~neurarch.report.Report`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any, Callable

from . import __version__, warm
from .inputs.prepare import prepare, resolve_spec
from .jobs import JobOutcome, Jobs, library_logs, release_collection, run_jobs, time_limit  # noqa: F401  (run_jobs re-exported)
from .options import DEFAULT_PLAN_TIMEOUT_S, DEFAULT_TIMEOUT_S, CostOptions, InputOptions, Options, PlanOptions  # noqa: F401  (re-exported)
from .plan.fit import ModeResult
from .report import InputInfo, InputTensor, ModelInfo, PassResult, Report
from .trace import trace
from .trace.counts import build_params
from .trace.cut import Repeats
from .trace.structure import build_structure
from .warm import LaterBatchError  # noqa: F401  (re-exported)


def _mode_job(built, plan, opts: Options, cards, mode: str) -> ModeResult:
    """One memory mode: its figures at the input batch and each card's largest
    batch; for full fine-tuning, where a card cannot hold batch 1, the
    simulated curves at batch 1 and 2 the multi-GPU plans are made from
    (:func:`neurarch.warm.multi_gpu`, in the parent, which knows the layer table).
    Every simulation it reads is kept, encoded, in ``ModeResult.sims`` (the report cache's)."""
    from .plan.curve import encode_result
    from .plan.fit import mode_result
    from .plan.memory import estimate_with_curve, with_batch
    from .plan.train import TrainSetup

    p = opts.plan
    assert p is not None  # a mode job exists only for a plan
    setup = TrainSetup.from_plan(p, mode=mode, precision=opts.precision)
    cache: dict = {}

    def at(b):
        if b not in cache:
            # Only the input batch is reported in full (first step too, read off its steady
            # state where it can be); the batch search needs the steady state alone.
            try:
                cache[b] = estimate_with_curve(built, with_batch(plan, b), setup, context_len=p.context_len, steady_only=b != plan.batch, first_read_off=b == plan.batch, cache=_use_cache(opts))
            except Exception as e:
                if plan.batch not in cache:
                    raise
                # after the input batch: the error depends on the cards (see warm.entry)
                raise LaterBatchError(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__) from e
        return cache[b]

    out = mode_result(at, plan.batch, cards, mode, p.headroom)
    out.sims = {b: encode_result(*v) for b, v in cache.items()}
    return out


def _count_job(built, opts: Options, default_shape):
    """The cost's per-op work.  It runs the model on the trace's fake tensors; a
    worker forked before the trace moves its own copy of the model to fake ones."""
    from torch._subclasses.fake_tensor import FakeTensor

    from .cost import count_step
    from .fake.tensors import new_mode, to_fake

    if not any(isinstance(p, FakeTensor) for p in built.model.parameters()):
        to_fake(built.model, new_mode())
    assert opts.cost is not None  # a count job exists only for a priced run
    return count_step(built.model, built.config, opts.inputs, opts.cost.precision, default_shape, cache=_use_cache(opts))


def _use_cache(opts: Options) -> bool:
    """Whether the plan's simulations and the cost count read and write the cache on disk
    (neurarch.plan.cache): ``Options.cache`` False (``--no-cache``) turns it off, as
    ``NEURARCH_NO_CACHE=1`` does."""
    return opts.cache


def _start_jobs(built, plan, opts: Options, cards, default_shape) -> Jobs:
    """Start the memory modes and the cost count (they need only the built model and its inputs)."""
    jobs: dict[str, Callable[[], Any]] = {}
    if opts.plan is not None:
        for mode in opts.plan.modes:
            jobs[mode] = functools.partial(_mode_job, built, plan, opts, cards, mode)
    if opts.cost is not None:
        jobs["cost"] = lambda: _count_job(built, opts, default_shape)
    order = [n for n in warm.JOB_ORDER if n in jobs]  # the report's errors are written in it
    # Started the slowest first, so two workers finish together, and the cost count, a second
    # or two, last: it fills the gap the worker that finishes first leaves.
    start = [n for n in ("lora", "qlora", "full", "inference", "cost") if n in jobs]
    return Jobs({n: jobs[n] for n in order}, start=start, init=_worker_init)


CUT_TRACE_UNITS = 8  # below this, two cut traces (5 repeats, the rest twice) save too little


def _repeats(model) -> tuple[Repeats, ...]:
    """The layer lists the trace may cut together (:mod:`neurarch.trace.cut`): the planner's
    stacks (:func:`neurarch.plan.depth.stacks_of`: its largest repeated list, and any other
    that repeats as many times, an encoder beside its decoder), when none ends in a
    partial repeat (special first layers are kept in both cut traces) and there are at
    least ``CUT_TRACE_UNITS`` repeats; else none."""
    from .plan.depth import stacks_of

    stacks = stacks_of(model)
    if not stacks or any(s.rest for s in stacks) or stacks[0].units < CUT_TRACE_UNITS:
        return ()
    return tuple(Repeats(s.path, s.period, s.units, s.head) for s in stacks)


def _worker_init() -> None:
    """A worker process only simulates (on fake tensors) and ends with the plan.

    It runs with no cyclic garbage collection: what its simulations keep (each run's
    storages and ops, read again at later batches, FakeTensor's cache) is walked whole
    by every full collection, a tenth of a mode's time, while what they leave to the
    collector is small (the model copies' reference cycles) and goes with the process
    (``benchmarks/worker_gc.py``).  Inside a simulation there is none anyway
    (:func:`neurarch.plan.simulation._run`)."""
    import gc

    from .plan.train.adapters import simulation_only

    simulation_only()
    gc.disable()


def analyze(spec: str, options: Options | None = None) -> Report:
    """Resolve, build and trace a model; return its report.

    A plan whose build, trace and simulations are in the report cache is
    answered from it (:mod:`neurarch.warm`: the cards, multi-GPU and cost
    sections recomputed for these options); a cold plan is stored there."""
    opts = options or Options()  # checked when it was made; never changed here
    cards = None
    warm_key = None
    if opts.priced is not None:
        hit = warm.lookup(spec, opts)
        if hit is not None:
            return hit
        warm_key = warm.key(spec, opts)
        cards, head = warm.cards_for(opts.priced)
        # The run this report prices, with the headline card's canonical name: a new value, the caller's stays as it was.
        opts = dataclasses.replace(opts, cost=dataclasses.replace(opts.priced, card=head))
    source = resolve_spec(spec, opts)
    keep = None
    with time_limit(opts.time_limit_s, f"tracing {source.id}"), library_logs() as library_warnings:
        want_jobs = opts.plan is not None or opts.cost is not None
        prepared = prepare(source, opts, recipe=want_jobs)  # build, plan the inputs, the recipe's model (and its eager bound)
        release_collection()  # built: collect again where an entry point held it (neurarch.jobs; on an error before, the entry point releases)
        built, plan, trained, attention = prepared.built, prepared.plan, prepared.trained, prepared.attention
        jobs = None
        section_errors: dict[str, str] = {}
        try:
            if want_jobs and plan.settled:
                jobs = _start_jobs(trained, plan, opts, cards, source.default_input_shape)  # forked now, they run while the model is traced
            with jobs.one_thread() if jobs is not None else contextlib.nullcontext():
                result = trace(built.model, plan, backward=opts.backward, repeats=_repeats(built.model) or None)
            params = build_params(built.model, source.checkpoint, built.config)
            structure = build_structure(built.model, result.recorder.events, opts.depth, result.unused_parameters)
            cost = memory = None
            fits: list = []
            multi: list = []
            traced = result.forward.ok and result.backward is not None and result.backward.ok
            if want_jobs and traced:
                if jobs is None:  # inputs the trace had to settle first (VLM image tokens, a fallback layout)
                    jobs = _start_jobs(trained, plan, opts, cards, source.default_input_shape)
                results = jobs.results()
                n = sum({id(t): t.numel() for t in trained.model.parameters()}.values())
                sections = warm.priced_sections(results, plan.batch, plan.seq_len, opts, cards, structure, n, attention)
                memory, fits, multi, cost = sections["memory"], sections["cards"], sections["multi_gpu"], sections["cost"]
                section_errors.update(sections["errors"])
                if warm_key is not None:
                    keep = (results, plan.batch, plan.seq_len, n, attention)
        finally:
            if jobs is not None:
                jobs.close()

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
        errors=section_errors,
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
            tokenizer=source.tokenizer,
            source_config=source.config,
        )
        try:
            verdict = verify.run(ctx, opts.disable)
        except Exception as e:  # noqa: BLE001 - a failed section is reported, the rest stands
            report.errors["verifier"] = warm.error_line(e)
        else:
            report.findings = verdict.findings
            report.verifier = verdict.verifier
    if keep is not None:
        warm.store(warm_key, warm.entry(report, *keep))
    return report
