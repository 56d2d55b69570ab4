"""Simulate training steps on fake tensors and report their memory.

``simulate(built, plan, setup)`` copies the meta model, prepares it (LoRA
injection, dtype casts, checkpointing) while it is still on meta, turns every
parameter into a FakeTensor, and runs ``steps`` real training steps (the code
in :mod:`neurarch.plan.step`) under FakeTensorMode with a
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
different tensors (:mod:`neurarch.plan.semantics`, multi-tensor optimizers);
``device="cpu"`` follows CPU's, which is what the CPU measurement checks.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import warnings
import weakref
from dataclasses import dataclass, field

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import _disable_current_modes

from ..build import BuiltModel
from ..inputs import InputPlan
from ..introspect import forward_params as _decoder_accepts, max_positions as _max_positions
from . import cache as _cache
from . import depth
from ..trace.fake import needs_value
from .fakefix import FakeGaps, unpacked_sequences
from .overhead import cuda_round, fixed_overhead
from ..report.memory import MemoryBreakdown, MemoryMode
from .semantics import CudaKernels
from .step import DEFAULT_LORA_RANK, Observer, PlanOptionError, TrainSetup, autocast_for, label_specs, make_batch, make_optimizer, prepare, quantize_4bit, train, trainable, warm_up
from .tracker import GRADIENT, INPUT, OPTIMIZER, WEIGHTS, Life, LiveTracker

CATEGORIES = ("weights", "gradients", "optimizer", "activations", "temporary")


def category(life: Life) -> str:
    """Which breakdown bucket a storage belongs to, from its role and life.

    * weights: parameters and buffers (registered before the run);
    * gradients: storages that became a parameter's ``.grad``;
    * optimizer: made inside ``optimizer.step()`` and still alive after it;
    * activations: made in forward and still alive when backward starts (what
      autograd saved, plus the loss), and the input batch;
    * temporary: everything else (freed inside the phase that made it:
      forward scratch, gradients of activations, the optimizer's scratch).
    """
    if life.role == WEIGHTS:
        return "weights"
    if life.role == GRADIENT:
        return "gradients"
    if life.role == OPTIMIZER:
        return "optimizer"
    if life.role == INPUT:
        return "activations"
    if life.phase == "optimizer":
        return "optimizer" if life.end is None or life.survives_optimizer else "temporary"
    if life.phase in ("forward", "prefill", "decode") and life.survives_forward:
        return "activations"  # in inference: the KV cache
    return "temporary"


@dataclass
class Curve:
    """Per op label, what a CUDA card holds right after it (rounded live bytes plus the
    fixed overhead) at ``batch``; the peak_bytes is the largest value."""

    batch: int
    values: dict
    sharded: dict = field(default_factory=dict)  # label -> weights + gradients + optimizer state alive there (what FSDP divides)
    segments: list | None = None  # [(segment, bytes)] in execution order, for a pipeline cut (full mode)


@dataclass
class Peak:
    bytes: int
    event: int  # index of the event at which it happened
    step: int
    phase: str
    module: str | None
    breakdown: dict[str, int] = field(default_factory=dict)


@dataclass
class Simulation:
    setup: TrainSetup
    steps: int
    peak: Peak  # over all steps
    step_peaks: list[Peak]
    trainable_parameters: int
    parameters: int
    lives: list[Life] = field(repr=False, default_factory=list)
    rounded_bytes: int = 0  # steady peak with CUDA's 512-byte rounding per allocation
    kv_cache_bytes: int | None = None
    context_len: int | None = None
    ops: list | None = field(repr=False, default=None)  # (event, step, phase, module) per op, when recorded
    method: str = "simulated"  # or how the figures were extrapolated (neurarch.plan.depth)
    curve: dict | None = field(repr=False, default=None)  # label -> rounded live bytes at the steady state (see fit.py)
    sharded: dict | None = field(repr=False, default=None)  # label -> weights + gradients + optimizer bytes there
    forward_end: int | None = None  # event at which the last step's forward ended (saved activations all alive)
    cut: tuple | None = None  # (stack, repeats) when lives come from a cut run

    @property
    def steady(self) -> Peak:
        """The peak from step 2 on (the first step's if only one was run)."""
        later = self.step_peaks[1:] or self.step_peaks
        return max(later, key=lambda p: p.bytes)

    @property
    def first(self) -> Peak:
        return self.step_peaks[0]


# --------------------------------------------------------------------------
# The model on fake tensors
# --------------------------------------------------------------------------

def _meta_like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="meta")


def meta_copy(model: nn.Module) -> nn.Module:
    """A deep copy of a meta (or already fake) model whose tensors are all on meta."""
    memo: dict[int, object] = {}
    for mod in model.modules():
        for p in mod._parameters.values():
            if p is not None and id(p) not in memo:
                memo[id(p)] = nn.Parameter(_meta_like(p), requires_grad=p.requires_grad)
        for b in mod._buffers.values():
            if b is not None and id(b) not in memo:
                memo[id(b)] = _meta_like(b)
    return copy.deepcopy(model, memo)


def _to_fake(model: nn.Module, mode: FakeTensorMode, device: str = "cpu") -> None:
    """Replace meta parameters and buffers by fake ones (tied tensors stay tied)."""
    conv = mode.fake_tensor_converter
    memo: dict[int, torch.Tensor] = {}

    def fake(t: torch.Tensor) -> torch.Tensor:
        m = t if t.device.type == "meta" else _meta_like(t)
        return conv.from_meta_and_device(mode, m, torch.device(device))

    for mod in model.modules():
        for name, p in list(mod._parameters.items()):
            if p is None:
                continue
            if id(p) not in memo:
                memo[id(p)] = nn.Parameter(fake(p.data), requires_grad=p.requires_grad)
            mod._parameters[name] = memo[id(p)]
        for name, b in list(mod._buffers.items()):
            if b is None:
                continue
            if id(b) not in memo:
                memo[id(b)] = fake(b)
            mod._buffers[name] = memo[id(b)]


def _fake_attributes(model: nn.Module, mode: FakeTensorMode) -> list[torch.Tensor]:
    """Plain tensor attributes (not parameters, not buffers) made fake too.

    The builder keeps small tensors real on the CPU (model code reads their
    values); a real tensor meeting fake ones is lifted afresh at every use,
    which would count as a new allocation each time.  Converted once here, they
    are weights-like state alive from the start; returned for registration.
    """
    out = []
    memo: dict[int, torch.Tensor] = {}
    for mod in model.modules():
        for name, v in list(vars(mod).items()):
            if isinstance(v, torch.Tensor) and not isinstance(v, (nn.Parameter, FakeTensor)):
                if id(v) not in memo:
                    memo[id(v)] = mode.from_tensor(v) if v.device.type != "meta" else \
                        mode.fake_tensor_converter.from_meta_and_device(mode, v, torch.device("cpu"))
                    out.append(memo[id(v)])
                object.__setattr__(mod, name, memo[id(v)])
    return out


# --------------------------------------------------------------------------
# Watching the loop
# --------------------------------------------------------------------------

class _Watch(Observer):
    def __init__(self, tracker: LiveTracker, gaps: FakeGaps | None = None):
        self.tracker = tracker
        self.gaps = gaps
        self.phase_starts: list[tuple[int, int, str]] = []  # (event, step, phase)
        self.values = None  # the value-tracking mode, when the step runs under one (see _run)

    @contextlib.contextmanager
    def phase(self, step: int, name: str):
        self.tracker.set_phase(step, name)
        self.phase_starts.append((self.tracker.events, step, name))
        if self.gaps is not None:
            self.gaps.in_optimizer = name == "optimizer"
        try:
            yield
        finally:
            if self.gaps is not None:
                self.gaps.in_optimizer = False
        self.tracker.set_phase(step, "between")
        self.phase_starts.append((self.tracker.events, step, f"end-{name}"))

    def after_backward(self, model: nn.Module) -> None:
        for p in model.parameters():
            if p.grad is not None:
                self.tracker.mark(p.grad, GRADIENT)
        self.tracker.end_backward()


def _decide_survival(lives: list[Life], marks: list[tuple[int, int, str]]) -> None:
    """Set life.survives_forward / survives_optimizer from the phase boundaries."""
    import bisect

    ends: dict[tuple[int, str], list[int]] = {}
    for ev, step, phase in marks:
        if phase.startswith("end-"):
            ends.setdefault((step, phase[4:]), []).append(ev)
    for evs in ends.values():
        evs.sort()

    def end_of(life: Life) -> int | None:
        # The end of the phase the life was made in (a step with gradient accumulation runs
        # forward and backward once per micro-batch: the first end after its start).
        evs = ends.get((life.step, life.phase))
        if not evs:
            return None
        i = bisect.bisect_left(evs, life.start)
        return evs[i] if i < len(evs) else evs[-1]

    for life in lives:
        boundary = end_of(life)
        life.survives_forward = life.phase in ("forward", "prefill", "decode") and (life.end is None or (boundary is not None and life.end > boundary))
        life.survives_optimizer = life.phase == "optimizer" and (life.end is None or (boundary is not None and life.end > boundary))


def _replay(lives: list[Life], lo: int, hi: int, size=lambda n: n) -> tuple[int, int]:
    """(peak, event) of live bytes over events lo..hi, sizes mapped by ``size``."""
    delta: dict[int, int] = {}
    for life in lives:
        n = size(life.nbytes)
        delta[life.start] = delta.get(life.start, 0) + n
        if life.end is not None:
            delta[life.end] = delta.get(life.end, 0) - n
    live, best, at = 0, None, lo
    for ev in sorted(delta):
        if ev > hi:
            break
        live += delta[ev]
        if ev >= lo and (best is None or live > best):
            best, at = live, ev
    return (live if best is None else best), at


def _peak_of(lives: list[Life], lo: int, hi: int) -> Peak:
    """The peak between events lo and hi, with what was alive at that instant."""
    best, at = _replay(lives, lo, hi)
    breakdown = dict.fromkeys(CATEGORIES, 0)
    for x in lives:
        if x.start <= at and (x.end is None or x.end > at):
            breakdown[category(x)] += x.nbytes
    birth = next((x for x in lives if x.start == at), None)
    step, phase, module = (birth.step, birth.phase, birth.module) if birth else (0, "set-up", None)
    return Peak(best, at, step, phase, module, breakdown)


# Models whose step read a value: run with values first next time.  Keyed by the config
# object (shared by a model and its cut copies), held weakly: a config that is gone, or a
# new object at a reused address, is not taken for the one that was seen.
_NEEDS_VALUES: dict[int, "weakref.ref"] = {}


def _reads_values(built: BuiltModel) -> bool:
    holder = built.config if built.config is not None else built.model
    ref = _NEEDS_VALUES.get(id(holder))
    return ref is not None and ref() is holder


def _with_values(built: BuiltModel, run):
    """``run(values)``: first without known values (the cheaper run), and again with
    them when the model's code asks a fake tensor for a value (VLMs count their
    image tokens: ``int(mask.sum())``, ``x[mask]``)."""
    if not _reads_values(built):
        try:
            return run(False)
        except Exception as e:
            if not needs_value(e):
                raise
            holder = built.config if built.config is not None else built.model
            try:
                _NEEDS_VALUES[id(holder)] = weakref.ref(holder, lambda _r, k=id(holder): _NEEDS_VALUES.pop(k, None))
            except TypeError:  # not weakly referenceable: ask again next time (slower, the same figures)
                pass
    return run(True)


def _run(model: nn.Module, setup: TrainSetup, body, plan: InputPlan | None = None, record_ops: bool = False,
         values: bool = False) -> tuple[LiveTracker, _Watch]:
    """Run ``body(tracker, watch)`` on the fake model under the tracker.

    QLoRA's weights are quantized first, with bitsandbytes' own code on fake
    tensors, and count as weights from the start.

    ``values``: run the step under the tracer's value-tracking mode
    (:class:`neurarch.trace.fake.ValueMode`) with ``guess=False``: small
    inputs (token ids, masks, grids) are real, ops on them are computed for
    real, so code that reads a value runs; a value that would depend on the
    weights is an error, never a guess.  That mode keeps no op's arguments, so
    lifetimes are what they would be.  ``watch.values`` hands it to ``body``
    for :func:`~neurarch.plan.step.make_batch`.
    """
    from ..trace.fake import VALUE_LIMIT, ValueMode, quiet_fake_logs

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    _to_fake(model, mode)
    tracker = LiveTracker(model, prefix_strip=("base_model.model.",))
    if record_ops:
        tracker.ops = []
    held = _fake_attributes(model, mode)
    gaps = FakeGaps()
    watch = _Watch(tracker, gaps)
    kernels = CudaKernels(setup.attn_implementation == "flash_attention_2") if setup.device == "cuda" else contextlib.nullcontext()
    quantized: list[torch.Tensor] = []
    if setup.mode == "qlora":
        with warnings.catch_warnings(), mode:
            warnings.simplefilter("ignore")
            quantized = quantize_4bit(model)
    quiet_fake_logs()
    if plan is not None and hasattr(plan, "resolve") and not getattr(plan, "resolved", True):
        # A probe run to count image tokens: not part of the tracked step.
        probe = ValueMode(mode)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        with warnings.catch_warnings(), mode, probe, probe.functions:
            warnings.simplefilter("ignore")
            plan.resolve(base, probe)
        del probe
    # Integer inputs (token ids, masks) keep their values however large the batch
    # (token ids at batch 10,000 ...); images and other float inputs need none.
    limit = max([VALUE_LIMIT, *(t.numel for t in getattr(plan, "tensors", []) if not t.dtype.is_floating_point)])
    known = ValueMode(mode, limit=limit, guess=False) if values else None
    watch.values = known
    value_modes = (known, known.functions) if known is not None else ()
    # No collection during the tracked run: frees happen where reference counts
    # drop, as on a device.  (A full gc.collect() here costs 0.3 s a run.)
    gc.collect(0)
    gc.disable()
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(warnings.catch_warnings())
            warnings.simplefilter("ignore")
            for cm in (unpacked_sequences(), mode, gaps, *value_modes, kernels, tracker):
                stack.enter_context(cm)  # the tracker innermost: it sees what the value mode returns
            for t in [*model.parameters(), *model.buffers(), *quantized, *held]:
                tracker.register(t, WEIGHTS)
            body(tracker, watch)
            tracker.close()
    finally:
        gc.enable()
    _decide_survival(tracker.lives, watch.phase_starts)
    return tracker, watch


def simulate(built: BuiltModel, plan: InputPlan, setup: TrainSetup | None = None, *, steps: int = 2, record_ops: bool = False,
             steady_only: bool = False) -> Simulation:
    """Simulate ``steps`` training steps of ``built`` on fake tensors.

    ``steady_only``: only step 2, after a warm-up that makes the optimizer state
    without step 1's forward and backward (:func:`~neurarch.plan.step.warm_up`);
    half the work, for the batch search, where only the steady state counts.
    """
    setup = setup or TrainSetup()
    setup.validate()
    if setup.mode == "inference":
        return simulate_inference(built, plan, setup, record_ops=record_ops)
    if not 1 <= steps <= 8:
        raise PlanOptionError(f"steps must be 1 to 8, got {steps}")
    return _with_values(built, lambda values: _simulate(built, plan, setup, steps, record_ops, steady_only, values))


def _simulate(built: BuiltModel, plan: InputPlan, setup: TrainSetup, steps: int, record_ops: bool, steady_only: bool,
              values: bool) -> Simulation:
    base = meta_copy(built.model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = prepare(base, setup)

    def body(tracker: LiveTracker, watch: _Watch) -> None:
        labels = label_specs(base, built.config, plan)  # here: the plan's token counts are resolved by now
        batch = make_batch(plan, labels, setup, real=False, values=watch.values)
        for t in batch.values():
            if isinstance(t, torch.Tensor):
                tracker.register(t, INPUT)
        optimizer = make_optimizer(trainable(model), setup)
        if steady_only:
            with watch.phase(1, "optimizer"):  # step 1's optimizer step alone: it makes the state
                for t in warm_up(optimizer, trainable(model)):
                    tracker.mark(t, OPTIMIZER)
            train(model, batch, optimizer, setup, 1, watch, device_type="cpu", first_step=2)
        else:
            train(model, batch, optimizer, setup, steps, watch, device_type="cpu")

    tracker, watch = _run(model, setup, body, plan, record_ops, values)
    lives = tracker.lives
    starts: dict = {}
    for ev, step, ph in watch.phase_starts:  # the first micro-batch's start; the one optimizer step's end
        starts.setdefault((step, ph), ev)
    step_peaks = []
    for s in ([2] if steady_only else range(1, steps + 1)):
        lo = starts.get((s, "forward"), 0)
        hi = starts.get((s, "end-optimizer"), tracker.events)
        step_peaks.append(_peak_of(lives, lo, hi))
    # The rounded replay of the steady part (step 2 on), for peak_bytes.
    lo = starts.get((2 if steady_only else min(2, steps), "forward"), 0)
    rounded = _replay(lives, lo, tracker.events, cuda_round)[0]
    sim = Simulation(setup, 1 if steady_only else steps, max(step_peaks, key=lambda p: p.bytes), step_peaks,
                     sum(p.numel() for p in trainable(model)), _count(model), lives)
    sim.rounded_bytes = rounded
    sim.ops = tracker.ops
    last = 2 if steady_only else steps
    sim.forward_end = starts.get((last, "end-forward"))
    return sim


def _count(model: nn.Module) -> int:
    return sum({id(p): p.numel() for p in model.parameters()}.values())


# --------------------------------------------------------------------------
# Inference: prefill at the input shape, KV cache at a context length
# --------------------------------------------------------------------------

def _reachable_tensors(obj, seen: set[int] | None = None, depth: int = 0) -> list[torch.Tensor]:
    """Tensors held by a cache object (DynamicCache layers, tuples of tuples ...)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 6:
        return []
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return [obj]
    out: list[torch.Tensor] = []
    if isinstance(obj, dict):
        items = obj.values()
    elif isinstance(obj, (list, tuple)):
        items = obj
    elif hasattr(obj, "__dict__") and not isinstance(obj, (nn.Module, type)):
        items = vars(obj).values()
    else:
        return out
    for v in items:
        out.extend(_reachable_tensors(v, seen, depth + 1))
    return out


def _storage_sum(tensors: list[torch.Tensor]) -> int:
    seen: dict[int, int] = {}
    for t in tensors:
        st = t.untyped_storage()
        seen[id(st)] = st.nbytes()
    return sum(seen.values())


def _learned_positions(model: nn.Module, limit: int) -> bool:
    """Whether the model looks positions up in a learned table of ``limit`` rows
    (``wpe``, ``embed_positions`` ...: OPT's has two more), not rotary or relative ones."""
    for name, mod in model.named_modules():
        leaf = name.rsplit(".", 1)[-1].lower()
        if isinstance(mod, nn.Embedding) and ("pos" in leaf or leaf == "wpe") and limit <= mod.num_embeddings <= limit + 2:
            return True
    return False


def _cache_of(out):
    for name in ("cache", "past_key_values"):
        c = getattr(out, name, None)
        if c is not None:
            return c
    return None


def simulate_inference(built: BuiltModel, plan: InputPlan, setup: TrainSetup, *, context_len: int | None = None, record_ops: bool = False) -> Simulation:
    """Prefill at the input shape; for decoders, then the KV cache at ``context_len``
    tokens and one decode step on it.  Weights are held in the compute dtype."""
    return _with_values(built, lambda values: _simulate_inference(built, plan, setup, context_len, record_ops, values))


def _simulate_inference(built: BuiltModel, plan: InputPlan, setup: TrainSetup, context_len: int | None, record_ops: bool,
                        values: bool) -> Simulation:
    model = prepare(meta_copy(built.model), setup)
    accepts = _decoder_accepts(model)
    # transformers 5 calls the cache argument ``cache``; 4.x called it ``past_key_values``.
    cache_arg = "cache" if "cache" in accepts else "past_key_values"
    decoder = cache_arg in accepts and plan.main == "input_ids" and not getattr(built.config, "is_encoder_decoder", False)
    ctx = context_len or plan.seq_len
    limit = _max_positions(built.config)
    if decoder and ctx and limit and ctx >= limit and _learned_positions(built.model, limit):
        # A table of learned positions (GPT-2, GPT-Neo): a full context leaves the decoded
        # token no position, so generation's cache holds one token less.
        ctx = limit - 1
    extra = {"use_cache": True} if decoder else {}
    if decoder and "logits_to_keep" in accepts:
        extra["logits_to_keep"] = 1  # generate() keeps the last position's logits only
    info: dict[str, int] = {}

    def body(tracker: LiveTracker, watch: _Watch) -> None:
        batch = make_batch(plan, [], setup, real=False, values=watch.values)
        batch.update(extra)  # generation's own switches win over the planner's (use_cache)
        for t in batch.values():
            if isinstance(t, torch.Tensor):
                tracker.register(t, INPUT)
        with torch.no_grad(), autocast_for(setup, "cpu"):
            with watch.phase(1, "prefill"):
                out = model(**batch)
            if not decoder:
                return
            cache = _cache_of(out)
            del out
            def token_ids(shape):
                if watch.values is None:
                    return torch.randint(0, 2, shape)
                # Under the value mode the ids are real (code may count special tokens in them).
                with _disable_current_modes():
                    real = torch.randint(0, 2, shape)
                ids = watch.values.real(real)
                tracker.register(ids, INPUT)
                return ids

            if ctx and plan.seq_len and ctx != plan.seq_len:
                del cache
                long = {"input_ids": token_ids((plan.batch, ctx))}
                with watch.phase(2, "prefill"):
                    cache = _cache_of(model(**long, **extra))
            info["kv"] = _storage_sum(_reachable_tensors(cache)) if cache is not None else 0
            step_ids = token_ids((plan.batch, 1))
            with watch.phase(3, "decode"):
                out = model(input_ids=step_ids, **{cache_arg: cache}, **extra)
            del out

    tracker, watch = _run(model, setup, body, plan, record_ops, values)
    lives = tracker.lives
    peak = _peak_of(lives, 0, tracker.events)
    # The prefill at context_len only builds the cache; what generation needs is
    # the prefill at the input shape and the decode step on the full cache.
    marks = {(s, ph): ev for ev, s, ph in watch.phase_starts}
    parts = [(1, "prefill"), (3, "decode")]
    peaks = [_peak_of(lives, marks[(s, ph)], marks.get((s, f"end-{ph}"), tracker.events)) for s, ph in parts if (s, ph) in marks]
    best = max(peaks, key=lambda p: p.bytes) if peaks else peak
    sim = Simulation(setup, 1, best, [best], 0, _count(model), lives)
    sim.rounded_bytes = max(
        _replay(lives, marks[(s, ph)], marks.get((s, f"end-{ph}"), tracker.events), cuda_round)[0]
        for s, ph in parts if (s, ph) in marks
    ) if peaks else _replay(lives, 0, tracker.events, cuda_round)[0]
    sim.kv_cache_bytes = info.get("kv")
    sim.context_len = ctx if decoder else None
    sim.ops = tracker.ops
    return sim


# --------------------------------------------------------------------------
# Deep models: two cut runs, extrapolated (neurarch.plan.depth)
# --------------------------------------------------------------------------

_NO_CUT: "weakref.WeakKeyDictionary[nn.Module, dict]" = weakref.WeakKeyDictionary()  # model -> {(mode, ...): why}
CUT_UNITS = (2, 3)


stack_of = depth.stack_of


def simulate_by_depth(built: BuiltModel, plan: InputPlan, setup: TrainSetup, *, steps: int = 2, context_len: int | None = None,
                      steady_only: bool = False) -> Simulation | None:
    """The simulation of ``built`` from two runs with its layer stack cut short, or
    None when the model has no stack worth cutting.  Raises depth.NotRepeating
    when the two runs do not line up op by op (then simulate the whole model)."""
    stack = stack_of(built.model)
    if stack is None:
        return None
    runs = []
    for units in CUT_UNITS:
        with depth.cut(built.model, stack, units) as short:
            cut = dataclasses.replace(built, model=meta_copy(short))
        if setup.mode == "inference":
            sim = simulate_inference(cut, plan, setup, context_len=context_len, record_ops=True)
        else:
            sim = simulate(cut, plan, setup, steps=steps, record_ops=True, steady_only=steady_only)
        runs.append((sim, depth.points(sim.lives, sim.ops, stack, units, category, cuda_round)))
    (sa, pa), (sb, pb) = runs
    ua, ub = CUT_UNITS
    pts = depth.extrapolate(pa, pb, ua, ub, stack)

    def peak(keep) -> tuple[Peak, int]:
        p, rounded = depth.peak_over(pts, keep)
        if p is None:
            raise depth.NotRepeating("no op in the phase")
        return Peak(p.total, -1, p.step, p.phase, p.module, dict(zip(depth.CATEGORIES, p.cats))), rounded

    keep = _steady_filter(setup, pts)
    if setup.mode == "inference":
        best, rounded = peak(keep)
        step_peaks = [best]
    else:
        step_peaks = [peak(lambda s, ph, k=k: s == k)[0] for k in sorted({p.step for p in pts.values()})]
        best = max(step_peaks, key=lambda p: p.bytes)
        rounded = peak(keep)[1]
    n = stack.units
    sim = Simulation(setup, sb.steps, best, step_peaks,
                     depth.line_int(sa.trainable_parameters, sb.trainable_parameters, ua, ub, n),
                     depth.line_int(sa.parameters, sb.parameters, ua, ub, n))
    sim.rounded_bytes = rounded
    sim.kv_cache_bytes = depth.line_int(sa.kv_cache_bytes, sb.kv_cache_bytes, ua, ub, n)
    sim.context_len = sb.context_len
    sim.curve = {k: p.rounded for k, p in pts.items() if keep(p.step, p.phase)}
    sim.sharded = {k: _shardable(pts[k]) for k in sim.curve}
    sim.lives, sim.forward_end = sb.lives, sb.forward_end  # the 3-repeat run's, for the per-layer split
    sim.cut = (stack, ub)
    sim.method = (f"simulated with the layer stack {stack.describe()} cut to {stack.depth(ua)} and {stack.depth(ub)} layers, "
                  f"and extrapolated to {stack.length} (the two runs checked op by op; whole simulations of the catalog models give the same figures, docs/accuracy.md)")
    return sim


def _shardable(p) -> int:
    """What FSDP divides over the cards at this op: weights, gradients and optimizer
    state, inside the optimizer step its scratch too (it runs on the shards), and
    autocast's low-precision copies of the weights (FSDP's mixed precision gathers
    each layer's low-precision weights when it runs, counted by the caller)."""
    return sum(p.cats[:3]) + (p.cats[4] if p.phase == "optimizer" else 0) + p.copies


def segment_bytes(model: nn.Module, sim: Simulation, peak: Peak) -> list[tuple[str, int]] | None:
    """What each top-level segment (a layer of the stack, or a module outside it)
    needs on its own card in a pipeline at this batch: its parameters' share of
    the weights, gradients and optimizer state at the steady peak (per element,
    as simulated), plus the activations its forward saved (alive when forward
    ended).  For a cut simulation the layers' activations come from the cut run
    (first, middle and last repeat) and are spread over the full depth."""
    if sim.forward_end is None or not sim.lives:
        return None
    stack = sim.cut[0] if sim.cut else stack_of(model)
    units = sim.cut[1] if sim.cut else (stack.units if stack else 0)
    parent = stack.path.rpartition(".")[0] if stack else ""
    depth_out = len(parent.split(".")) + 1 if parent else 1
    prefix = stack.path + "." if stack else None

    def segment(name: str | None) -> str | None:
        if not name:
            return None
        if prefix and name.startswith(prefix):
            return prefix + name[len(prefix):].split(".")[0]
        return ".".join(name.split(".")[:depth_out])

    ev = sim.forward_end
    act: dict[str, int] = {}
    first_seen: dict[str, int] = {}
    for x in sim.lives:
        seg = segment(x.module)
        if seg is not None and x.phase == "forward":
            first_seen.setdefault(seg, x.start)
        if x.start <= ev and (x.end is None or x.end > ev) and category(x) == "activations" and seg is not None:
            act[seg] = act.get(seg, 0) + x.nbytes
    numel: dict[str, int] = {}
    seen: set[int] = set()
    for name, p in model.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        seg = segment(name.rsplit(".", 1)[0]) or name
        numel[seg] = numel.get(seg, 0) + p.numel()
    total = sum(numel.values())
    if not total:
        return None
    b = peak.breakdown
    # A peak in the optimizer step holds its per-parameter scratch: that scales with the stage's parameters too.
    scratch = b["temporary"] if peak.phase == "optimizer" else 0
    per_elem = (b["weights"] + b["gradients"] + b["optimizer"] + scratch) / total
    if stack is not None and sim.cut:
        # Layer i of the full stack acts like the cut run's first, middle or last repeat.
        def layer_act(i: int) -> int:
            if i < stack.head:
                j = i
            else:
                blk, o = divmod(i - stack.head, stack.period)
                if blk >= stack.units:
                    j = stack.head + units * stack.period + (i - stack.head - stack.units * stack.period)
                elif blk == 0:
                    j = i
                elif blk == stack.units - 1:
                    j = stack.head + (units - 1) * stack.period + o
                else:
                    j = stack.head + stack.period + o
            return act.get(f"{prefix}{j}", 0)
        for i in range(stack.length):
            act[f"{prefix}{i}"] = layer_act(i)
    order_key = {seg: first_seen.get(seg, 1 << 62) for seg in numel}
    if stack is not None:
        # Layers run in index order; those the cut run did not have sit after the last it had.
        base = first_seen.get(f"{prefix}0", 0)
        for i in range(stack.length):
            order_key[f"{prefix}{i}"] = base + i * 1e-6
    names = sorted(set(numel) | set(act), key=lambda s_: (order_key.get(s_, 1 << 62), s_))
    return [(n, int(numel.get(n, 0) * per_elem) + act.get(n, 0)) for n in names]


def _steady_filter(setup: TrainSetup, pts: dict):
    """Which labels count for the peak that decides a fit: step 2 on in training, the
    prefill at the input shape and the decode step in inference."""
    if setup.mode == "inference":
        has = {(p.step, p.phase) for p in pts.values()} & {(1, "prefill"), (3, "decode")}
        return (lambda s, ph: (s, ph) in has) if has else (lambda s, ph: True)
    last = max((p.step for p in pts.values()), default=1)
    return lambda s, ph: s >= min(2, last)


_NO_STACK = depth.Stack("\0", 0, 0, 1)  # labels every op as outside any stack


def simulate_mode(built: BuiltModel, plan: InputPlan, setup: TrainSetup, *, steps: int = 2, context_len: int | None = None,
                  cut_depth: bool = True, steady_only: bool = False) -> Simulation:
    """Simulate one mode: by depth when the model has a stack worth cutting, else whole."""
    why = None
    failed = _NO_CUT.setdefault(built.model, {})
    key = setup
    if cut_depth and key in failed:
        why = failed[key]  # it did not line up at another batch: do not try again
    elif cut_depth:
        try:
            sim = simulate_by_depth(built, plan, setup, steps=steps, context_len=context_len, steady_only=steady_only)
        except PlanOptionError:
            raise
        except Exception as e:  # the cut model does not run or does not line up: simulate it whole
            sim = None
            why = failed[key] = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        if sim is not None:
            return sim
    if setup.mode == "inference":
        sim = simulate_inference(built, plan, setup, context_len=context_len, record_ops=True)
    else:
        sim = simulate(built, plan, setup, steps=steps, record_ops=True, steady_only=steady_only)
    pts = depth.points(sim.lives, sim.ops, _NO_STACK, 0, category, cuda_round)
    keep = _steady_filter(setup, pts)
    sim.curve = {k: p.rounded for k, p in pts.items() if keep(p.step, p.phase)}
    sim.sharded = {k: _shardable(pts[k]) for k in sim.curve}
    sim.ops = None
    if why:
        sim.method = f"simulated whole (the cut-depth shortcut did not apply: {why})"
    return sim


# --------------------------------------------------------------------------
# The report section
# --------------------------------------------------------------------------

def estimate(built: BuiltModel, plan: InputPlan, mode: str = "full", **options) -> MemoryMode:
    """One ``memory.<mode>`` section: simulate, then add the CUDA overhead."""
    return estimate_with_curve(built, plan, mode, **options)[0]


def estimate_with_curve(
    built: BuiltModel,
    plan: InputPlan,
    mode: str = "full",
    *,
    precision: str = "bf16-mixed",
    optimizer: str = "adamw",
    grad_checkpointing: bool = False,
    lora_rank: int = DEFAULT_LORA_RANK,
    lora_targets: tuple[str, ...] | None = None,
    lora_dropout: float = 0.0,
    adapter_dtype: str | None = None,
    attn_implementation: str | None = None,
    grad_accumulation: int = 1,
    device: str = "cuda",
    steps: int = 2,
    context_len: int | None = None,
    hopper: bool = True,
    cut_depth: bool = True,
    steady_only: bool = False,
    cache: bool = False,
) -> tuple[MemoryMode, "Curve | None"]:
    """``estimate`` and the per-op curve the batch search extrapolates (:mod:`.fit`).

    ``steady_only`` simulates step 2 alone (see :func:`simulate`): the figures
    that decide a fit are the same, the first step's peak is not known (None).
    ``cache``: read and write the result in the simulation cache on disk
    (:mod:`.cache`; the planner's runs turn it on, ``NEURARCH_NO_CACHE=1`` off).
    """
    setup = TrainSetup(mode=mode, precision=precision, optimizer=optimizer, grad_checkpointing=grad_checkpointing,
                       lora_rank=lora_rank, lora_targets=lora_targets, lora_dropout=lora_dropout, adapter_dtype=adapter_dtype,
                       attn_implementation=attn_implementation, grad_accumulation=grad_accumulation, device=device)
    setup.validate()
    k = None
    if cache and _cache.enabled():
        k = _cache.key("memory", built.model, built.config, _key_plan(plan), _key_setup(setup), steps, context_len, hopper, cut_depth,
                       steady_only)
    failed = _NO_CUT.setdefault(built.model, {})
    known_failure = setup in failed

    def compute():
        result = _estimate_with_curve(built, plan, setup, steps=steps, context_len=context_len, hopper=hopper, cut_depth=cut_depth,
                                      steady_only=steady_only)
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
    setup = dataclasses.replace(setup, lora_rank=plain.lora_rank, lora_targets=plain.lora_targets, lora_dropout=plain.lora_dropout,
                                adapter_dtype=plain.adapter_dtype)
    return dataclasses.replace(setup, optimizer=plain.optimizer) if setup.mode == "inference" else setup


def _encode_estimate(value) -> dict:
    (mem, curve), why = value
    return {
        "memory": mem.model_dump(mode="json"),
        "curve": None if curve is None else {
            "batch": curve.batch,
            "values": [[list(k), v] for k, v in curve.values.items()],
            "sharded": [[list(k), v] for k, v in curve.sharded.items()],
            "segments": None if curve.segments is None else [list(s) for s in curve.segments],
        },
        "no_cut": why,
    }


def _decode_estimate(raw: dict):
    mem = MemoryMode.model_validate(raw["memory"])
    c = raw["curve"]
    curve = None if c is None else Curve(
        c["batch"], {tuple(k): v for k, v in c["values"]}, {tuple(k): v for k, v in c["sharded"]},
        None if c["segments"] is None else [tuple(s) for s in c["segments"]],
    )
    return (mem, curve), raw["no_cut"]


def simulations_run() -> int:
    """How many simulations this process ran (a cache hit runs none)."""
    return _SIMULATIONS[0]


_SIMULATIONS = [0]


def _estimate_with_curve(built: BuiltModel, plan: InputPlan, setup: TrainSetup, *, steps: int, context_len: int | None, hopper: bool,
                         cut_depth: bool, steady_only: bool) -> tuple[MemoryMode, "Curve | None"]:
    mode, precision, optimizer, device = setup.mode, setup.precision, setup.optimizer, setup.device
    grad_checkpointing, lora_rank, lora_targets, lora_dropout = setup.grad_checkpointing, setup.lora_rank, setup.lora_targets, setup.lora_dropout
    adapter_dtype = setup.adapter_dtype
    _SIMULATIONS[0] += 1
    sim = simulate_mode(built, plan, setup, steps=steps, context_len=context_len, cut_depth=cut_depth,
                        steady_only=steady_only and mode != "inference")
    peak = sim.steady
    peak_bytes = sim.rounded_bytes + fixed_overhead(training=mode != "inference", hopper=hopper)
    notes = [] if sim.method == "simulated" else [sim.method]
    if device == "cuda":
        notes.append("peak_bytes: caching-allocator rounding, cuBLAS workspaces and the CUDA context are included; allocator fragmentation is not")
        if precision.endswith("-mixed"):
            notes.append("autocast: CUDA's fp32 op list is applied to the ops models call from Python (layer_norm, softmax, exp ...); ops inside C++ composites follow CPU's")
    if mode in ("lora", "qlora"):
        where = ("every linear layer but the head (CNNs: the convolutions)" if lora_targets in (None, ("all-linear",))
                 else "the modules peft matches to " + ",".join(lora_targets))
        adapters = "bf16 adapters" if adapter_dtype == "bf16" else "fp32 adapters (peft's autocast_adapter_dtype)"
        notes.append(f"LoRA rank {lora_rank} on {where}, dropout {lora_dropout:g}, {adapters}; the head and all "
                     "base weights frozen, as peft leaves them without modules_to_save")
    if mode == "qlora":
        notes.append("QLoRA as peft's prepare_model_for_kbit_training leaves it: non-quantized weights (embeddings, norms, head) "
                     "in fp32; that helper also turns on gradient checkpointing by default, here only with grad_checkpointing")
    overhead = peak_bytes - sim.rounded_bytes
    curve = Curve(plan.batch, {k: v + overhead for k, v in sim.curve.items()}, sim.sharded or {}) if sim.curve else None
    if curve is not None and mode == "full" and not steady_only:
        try:
            curve.segments = segment_bytes(built.model, sim, peak)
        except Exception:  # the pipeline cut is an extra: without it, no pipeline plan
            curve.segments = None
    return MemoryMode(
        peak_tensor_bytes=peak.bytes,
        peak_bytes=peak_bytes,
        first_step_peak_tensor_bytes=None if steady_only and mode != "inference" else sim.first.bytes,
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
