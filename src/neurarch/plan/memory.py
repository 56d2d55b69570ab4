"""Simulate training steps on fake tensors and report their memory.

``simulate(built, plan, setup)`` copies the meta model, prepares it (LoRA
injection, dtype casts, checkpointing) while it is still on meta, turns every
parameter into a FakeTensor, and runs ``steps`` real training steps (the code
in :mod:`neurarch.plan.train`) under FakeTensorMode with a
:class:`~neurarch.plan.tracker.LiveTracker` watching.  Nothing is allocated;
every storage's size and lifetime is recorded.

The figures:

* the peak of live tensor bytes over the whole run, and over each step.  The
  steady-state peak (step 2 on) is the one that decides whether a run fits:
  from the second step the optimizer state exists during forward and backward.
* what was alive at that instant, by category (decided from each storage's
  whole life, see :func:`category`), and the step / phase / module running.

Modes: ``full``, ``lora`` (peft), ``qlora`` (bitsandbytes NF4 + peft) and
``inference`` (:func:`simulate_inference`: prefill at the input shape, and for
decoders the KV cache at a context length plus one decode step on it).
:func:`estimate` turns a simulation into the report's ``memory.<mode>``
section, adding the CUDA overhead of :mod:`neurarch.plan.overhead`;
:func:`neurarch.plan.fit.card_batch` finds the largest batch that fits a card
from these simulations at several batches.

``device="cuda"`` (the default) follows CUDA's kernel choices where they keep
different tensors (:mod:`neurarch.fake.cuda`, multi-tensor optimizers);
``device="cpu"`` follows CPU's, which is what the CPU measurement checks.
"""

from __future__ import annotations

import copy
import dataclasses

from ..build import BuiltModel
from ..inputs import InputPlan
from ..report.memory import MemoryBreakdown, MemoryMode
from . import cache as _cache
from .by_depth import _NO_CUT, CUT_UNITS, segment_bytes, simulate_by_depth, simulate_mode, stack_of  # noqa: F401  (the planner's public names)
from .curve import decode_result, encode_result
from .inference import simulate_inference  # noqa: F401
from .overhead import fixed_overhead
from .simulation import CATEGORIES, Curve, Peak, Simulation, category, first_step_derivable, simulate  # noqa: F401
from .train import TrainSetup

# --------------------------------------------------------------------------
# The report section
# --------------------------------------------------------------------------


_SETUP_FIELDS = frozenset(f.name for f in dataclasses.fields(TrainSetup))


def estimate(built: BuiltModel, plan: InputPlan, mode: str = "full", **options) -> MemoryMode:
    """One ``memory.<mode>`` section: simulate, then add the CUDA overhead.

    A shorthand for scripts and tests: the recipe's fields (``precision``,
    ``optimizer``, ``lora_rank`` ...: :class:`~neurarch.plan.train.TrainSetup`'s)
    and :func:`estimate_with_curve`'s own options as keywords."""
    recipe = {k: options.pop(k) for k in list(options) if k in _SETUP_FIELDS}
    return estimate_with_curve(built, plan, TrainSetup(mode=mode, **recipe), **options)[0]


def estimate_with_curve(
    built: BuiltModel,
    plan: InputPlan,
    setup: TrainSetup,
    *,
    steps: int = 2,
    context_len: int | None = None,
    hopper: bool = True,
    cut_depth: bool = True,
    steady_only: bool = False,
    first_read_off: bool = False,
    cache: bool = False,
) -> tuple[MemoryMode, "Curve | None"]:
    """``estimate`` of one mode's recipe (``setup``, e.g. :meth:`TrainSetup.from_plan`)
    and the per-op curve the batch search extrapolates (:mod:`.fit`).

    ``steady_only`` simulates step 2 alone (see :func:`simulate`): the figures
    that decide a fit are the same, the first step's peak is not known (None).
    ``first_read_off`` (a plan's input batch): the two steps' figures, from a run of step 2
    alone where the first step's peak can be read off it (an Adam or AdamW recipe whose step 2
    leaves nothing behind: :func:`neurarch.plan.simulation.first_step_bytes`), else from two
    simulated steps; the same figures either way, for less than two steps' work.
    ``cache``: read and write the result in the simulation cache on disk
    (:mod:`.cache`; the planner's runs turn it on, ``NEURARCH_NO_CACHE=1`` off).
    """
    setup.validate()
    k = None
    if cache and _cache.enabled():
        k = _cache.key("memory", built.model, built.config, _key_plan(plan), _key_setup(setup), steps, context_len, hopper, cut_depth, steady_only, first_read_off)
    failed = _NO_CUT.setdefault(built.model, {})
    known_failure = setup in failed

    def compute():
        result = _estimate_with_curve(built, plan, setup, steps=steps, context_len=context_len, hopper=hopper, cut_depth=cut_depth, steady_only=steady_only, first_read_off=first_read_off)
        return result, (failed.get(setup) if not known_failure else None)

    def decode(raw):
        result, why = _decode_estimate(raw)
        if why is not None:  # what the computing run learnt about the cut, as if it had run here
            failed.setdefault(setup, why)
        return result, why

    return _cache.cached(k, compute, _encode_estimate, decode)[0]


def _key_plan(plan: InputPlan) -> InputPlan:
    """The inputs as the cache keys them: a plan with no token count left to ask the model
    for is the same plan before and after :meth:`InputPlan.resolve` (which only marks it)."""
    pending = any(r.count is None for t in plan.tensors for r in t.runs)
    return plan if plan.resolved or pending else dataclasses.replace(plan, resolved=True)


def _key_setup(setup: TrainSetup) -> TrainSetup:
    """The setup as the cache keys it: options a mode never reads are left out (the LoRA
    options of full fine-tuning and inference, inference's optimizer), so changing them
    re-simulates nothing."""
    if setup.mode in ("lora", "qlora"):
        return setup
    plain = TrainSetup()
    setup = dataclasses.replace(setup, lora_rank=plain.lora_rank, lora_targets=plain.lora_targets, lora_dropout=plain.lora_dropout, adapter_dtype=plain.adapter_dtype)
    return dataclasses.replace(setup, optimizer=plain.optimizer) if setup.mode == "inference" else setup


def _encode_estimate(value) -> dict:
    (mem, curve), why = value
    return {**encode_result(mem, curve), "no_cut": why}


def _decode_estimate(raw: dict):
    return decode_result(raw), raw["no_cut"]


def simulations_run() -> int:
    """How many simulations this process ran (a cache hit runs none)."""
    return _SIMULATIONS[0]


_SIMULATIONS = [0]


def first_steps_read_off() -> int:
    """How many input batches this process gave the first step's peak of from a run of step 2 alone
    (``first_read_off``), instead of simulating the two steps."""
    return _FIRST_READ_OFF[0]


_FIRST_READ_OFF = [0]


def _estimate_with_curve(
    built: BuiltModel, plan: InputPlan, setup: TrainSetup, *, steps: int, context_len: int | None, hopper: bool, cut_depth: bool, steady_only: bool, first_read_off: bool = False
) -> tuple[MemoryMode, "Curve | None"]:
    mode, precision, optimizer, device = setup.mode, setup.precision, setup.optimizer, setup.device
    grad_checkpointing, lora_rank, lora_targets, lora_dropout = setup.grad_checkpointing, setup.lora_rank, setup.lora_targets, setup.lora_dropout
    adapter_dtype = setup.adapter_dtype
    _SIMULATIONS[0] += 1
    read_off = first_read_off and not steady_only and steps == 2 and first_step_derivable(setup)
    sim = simulate_mode(built, plan, setup, steps=steps, context_len=context_len, cut_depth=cut_depth, steady_only=(steady_only or read_off) and mode != "inference", input_batch=read_off)
    first = sim.first.bytes
    if read_off:
        if sim.first_derived is None:  # step 2 leaves something behind (or a phase between): two steps
            _SIMULATIONS[0] += 1
            sim = simulate_mode(built, plan, setup, steps=steps, context_len=context_len, cut_depth=cut_depth)
            first = sim.first.bytes
        else:
            first = sim.first_derived
            _FIRST_READ_OFF[0] += 1
    peak = sim.steady
    peak_bytes = sim.rounded_bytes + fixed_overhead(training=mode != "inference", hopper=hopper)
    notes = [] if sim.method == "simulated" else [sim.method]
    if device == "cuda":
        notes.append("peak_bytes: caching-allocator rounding, cuBLAS workspaces and the CUDA context are included; allocator fragmentation is not")
        if precision.endswith("-mixed"):
            notes.append("autocast: CUDA's fp32 op list is applied to the ops models call from Python (layer_norm, softmax, exp ...); ops inside C++ composites follow CPU's")
    if mode in ("lora", "qlora"):
        where = "every linear layer but the head (CNNs: the convolutions)" if lora_targets is None or lora_targets == ("all-linear",) else "the modules peft matches to " + ",".join(lora_targets)
        adapters = "bf16 adapters" if adapter_dtype == "bf16" else "fp32 adapters (peft's autocast_adapter_dtype)"
        notes.append(f"LoRA rank {lora_rank} on {where}, dropout {lora_dropout:g}, {adapters}; the head and all base weights frozen, as peft leaves them without modules_to_save")
    if mode == "qlora":
        notes.append(
            "QLoRA as peft's prepare_model_for_kbit_training leaves it: non-quantized weights (embeddings, norms, head) "
            "in fp32; that helper also turns on gradient checkpointing by default, here only with grad_checkpointing"
        )
    overhead = peak_bytes - sim.rounded_bytes
    curve = Curve(plan.batch, {k: v + overhead for k, v in sim.curve.items()}, sim.sharded or {}, exact={k: v + overhead for k, v in (sim.exact or {}).items()}) if sim.curve else None
    if curve is not None and mode == "full" and not steady_only:  # the input batch's
        try:
            curve.segments = segment_bytes(built.model, sim, peak)
        except Exception:  # the pipeline cut is an extra: without it, no pipeline plan
            curve.segments = None
    return MemoryMode(
        peak_tensor_bytes=peak.bytes,
        peak_bytes=peak_bytes,
        first_step_peak_tensor_bytes=None if steady_only and mode != "inference" else first,
        phase=peak.phase,
        module=peak.module,
        step=peak.step,
        breakdown=MemoryBreakdown(**peak.breakdown, overhead=peak_bytes - peak.bytes),
        trainable_parameters=sim.trainable_parameters,
        precision=precision,
        optimizer=None if mode == "inference" else optimizer,
        grad_checkpointing=grad_checkpointing,
        lora_rank=lora_rank if mode in ("lora", "qlora") else None,
        batch=plan.batch,
        input_shape=list(plan.main_shape),
        device_semantics=device,
        kv_cache_bytes=sim.kv_cache_bytes,
        context_len=sim.context_len,
        notes=notes,
    ), curve


# --------------------------------------------------------------------------
# Other batches (the batch search itself is plan.fit.card_batch)
# --------------------------------------------------------------------------


def with_batch(plan: InputPlan, batch: int) -> InputPlan:
    """The same inputs at another batch size (every tensor whose first dim is the batch)."""
    new = copy.deepcopy(plan)
    for t in new.tensors:
        if t.shape and t.shape[0] == plan.batch:
            t.shape = (batch, *t.shape[1:])
    new.batch = batch
    return new
