"""One simulated run: the model on fake tensors, the tracker watching, the peaks.

:func:`simulate` copies the meta model, prepares it for the mode (:mod:`.step`),
turns its tensors fake, runs the training steps under FakeTensorMode with a
:class:`~neurarch.plan.tracker.LiveTracker` watching, and returns a
:class:`Simulation`: every storage's life, the peak over the run and per step,
and what was alive at the peak by category (:func:`category`).  Inference is
:mod:`.inference`; deep models cut short are :mod:`.by_depth`; the report
section is :mod:`.memory`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import warnings
import weakref
from dataclasses import dataclass, field

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from ..build import BuiltModel
from ..fake.convert import fake_attributes, meta_copy, weights_to_fake
from ..fake.cuda import CudaKernels
from ..fake.gaps import FakeGaps, unpacked_sequences
from ..fake.tensors import ValueMode, needs_value
from ..fake.views import fast_fake
from ..inputs import InputPlan
from .curve import Curve  # noqa: F401  (the planner's public name)
from .overhead import cuda_round
from .tracker import GRADIENT, INPUT, OPTIMIZER, WEIGHTS, Carried, Life, LiveTracker, uncarried
from .train import Observer, PlanOptionError, TrainSetup, biases_cast_on_first_forward, label_specs, make_batch, make_optimizer, prepare, quantize_4bit, train, trainable, warm_up

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
    exact: dict | None = field(repr=False, default=None)  # label -> live bytes before rounding (the curve's lower bound)
    forward_end: int | None = None  # event at which the last step's forward ended (saved activations all alive)
    cut: tuple | None = None  # (stacks, the first run's repeats, the second run's repeats) for a cut simulation; its lives are the second run's
    cut_ops: tuple[int, int] | None = None  # ops the two cut runs made (what choosing the cut cost)
    # The event ranges its figures are read in: step_peaks' (inference: the largest of them is the
    # one peak), and the rounded peak's (the largest over them): see refigured.
    windows: tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]] | None = field(repr=False, default=None)
    # A steady-state run's step 2: the events of its forward and backward, and of its optimizer step
    # (where :func:`first_step_bytes` reads the first step off it).
    first_windows: tuple[tuple[int, int], tuple[int, int]] | None = field(repr=False, default=None)
    # The first step's peak read off a steady-state run (first_step_bytes, or a cut run's points), when it can be.
    first_derived: int | None = None
    # What a steady-state run carried back to step 1 (QLoRA's biases cast in its forward: tracker.carry_back);
    # its lives are step 2's as a real one runs it, tracker.uncarried gives them as the run ran them.
    carried: tuple[Carried, ...] = ()

    @property
    def steady(self) -> Peak:
        """The peak from step 2 on (the first step's if only one was run)."""
        later = self.step_peaks[1:] or self.step_peaks
        return max(later, key=lambda p: p.bytes)

    @property
    def first(self) -> Peak:
        return self.step_peaks[0]


def refigured(sim: Simulation, lives: list[Life], kv_cache_bytes: int | None) -> Simulation:
    """``sim`` with other bytes: the same storages (``lives``, each made and freed at the same
    event) and the same ops, so its peaks are read in the same event ranges (``sim.windows``)."""
    assert sim.windows is not None  # set by every simulation
    peaks_in, rounded_in = sim.windows
    step_peaks = [_peak_of(lives, lo, hi) for lo, hi in peaks_in]
    if sim.setup.mode == "inference":
        step_peaks = [max(step_peaks, key=lambda p: p.bytes)]
    out = dataclasses.replace(sim, peak=max(step_peaks, key=lambda p: p.bytes), step_peaks=step_peaks, lives=lives, kv_cache_bytes=kv_cache_bytes, first_derived=None)
    out.rounded_bytes = max(_replay(lives, lo, hi, cuda_round)[0] for lo, hi in rounded_in)
    return out


# --------------------------------------------------------------------------
# Watching the loop
# --------------------------------------------------------------------------


class _Watch(Observer):
    def __init__(self, tracker: LiveTracker, gaps: FakeGaps | None = None):
        self.tracker = tracker
        self.gaps = gaps
        self.phase_starts: list[tuple[int, int, str]] = []  # (event, step, phase)
        self.values: ValueMode | None = None  # the value-tracking mode, when the step runs under one (see _run)
        # The trainable parameters without a gradient after the last backward (those the forward did not use).
        self.without_gradient: list[nn.Parameter] = []

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
        self.without_gradient = []
        for p in model.parameters():
            if p.grad is not None:
                self.tracker.mark(p.grad, GRADIENT)
            elif p.requires_grad:
                self.without_gradient.append(p)
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

                def forget(_ref: object, k: int = id(holder)) -> None:
                    _NEEDS_VALUES.pop(k, None)

                _NEEDS_VALUES[id(holder)] = weakref.ref(holder, forget)
            except TypeError:  # not weakly referenceable: ask again next time (slower, the same figures)
                pass
    return run(True)


# False: a steady-state QLoRA run keeps the biases its step 2 casts where it cast them, as before
# it carried them back (the A/B of benchmarks/qlora_bias_check.py and the tests).
CARRY_BACK = True

# False: every op through every mode, the tracker answering nothing itself (the layout the
# tests compare the direct one with: tests/plan/test_tracker_device.py).
DIRECT = True


@fast_fake()
def _run(model: nn.Module, setup: TrainSetup, body, plan: InputPlan | None = None, record_ops: bool = False, values: bool = False) -> tuple[LiveTracker, _Watch]:
    """Run ``body(tracker, watch)`` on the fake model under the tracker.

    FakeTensor's cache keys and views are neurarch's equals of torch's throughout
    (:func:`neurarch.fake.views.fast_fake`: the same keys and views, sooner).

    QLoRA's weights are quantized first, with bitsandbytes' own code on fake
    tensors, and count as weights from the start.

    ``values``: run the step under the tracer's value-tracking mode
    (:class:`neurarch.fake.tensors.ValueMode`) with ``guess=False``: small
    inputs (token ids, masks, grids) are real, ops on them are computed for
    real, so code that reads a value runs; a value that would depend on the
    weights is an error, never a guess.  That mode keeps no op's arguments, so
    lifetimes are what they would be.  ``watch.values`` hands it to ``body``
    for :func:`~neurarch.plan.train.make_batch`.
    """
    from ..fake.tensors import VALUE_LIMIT, ValueMode, quiet_fake_logs

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    weights_to_fake(model, mode)
    tracker = LiveTracker(model, prefix_strip=("base_model.model.",))
    if record_ops:
        tracker.ops = []
    held = fake_attributes(model, mode)
    gaps = FakeGaps()
    watch = _Watch(tracker, gaps)
    # CUDA's kernel choices run from the tracker's torch-function mode, right below it (one mode fewer per torch call)
    tracker.nodes.below = CudaKernels(setup.attn_implementation == "flash_attention_2") if setup.device == "cuda" else None
    quantized: list[torch.Tensor] = []
    if setup.mode == "qlora":
        with warnings.catch_warnings(), mode:
            warnings.simplefilter("ignore")
            quantized = quantize_4bit(model)
    quiet_fake_logs()
    if plan is not None and hasattr(plan, "resolve") and not getattr(plan, "resolved", True):
        # A probe run to count image tokens: not part of the tracked step.
        probe = ValueMode(mode)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model  # type: ignore[operator]  # peft's method, found by hasattr; nn.Module.__getattr__'s stub says Tensor | Module
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
    # With no value mode between them, the tracker answers a fake tensor's device itself
    # and runs the gaps' answers in its own handler: the same ops, a dispatch frame less each.
    direct = known is None and DIRECT
    tracker.runs_ops = gaps if direct else None
    gaps.fake = mode if direct else None  # the mode right below the tracker: hits answered there (neurarch.fake.hits.cached)
    # No collection during the tracked run: frees happen where reference counts
    # drop, as on a device.  (A full gc.collect() here costs 0.3 s a run.)  Before it the
    # young garbage goes, and afterwards collection is as it was, where the process collects;
    # a plan's worker process does not (neurarch.pipeline._worker_init): no collection at all,
    # there gen 0 would hold everything made since the last run.
    collecting = gc.isenabled()
    if collecting:
        gc.collect(0)
    gc.disable()
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(warnings.catch_warnings())
            warnings.simplefilter("ignore")
            for cm in (unpacked_sequences(), mode, *(() if direct else (gaps,)), *value_modes, tracker):
                stack.enter_context(cm)  # the tracker innermost: it sees what the value mode returns
            for t in [*model.parameters(), *model.buffers(), *quantized, *held]:
                tracker.register(t, WEIGHTS)
            body(tracker, watch)
            tracker.close()
    finally:
        if collecting:
            gc.enable()
    _decide_survival(tracker.lives, watch.phase_starts)
    return tracker, watch


def simulate(built: BuiltModel, plan: InputPlan, setup: TrainSetup | None = None, *, steps: int = 2, record_ops: bool = False, steady_only: bool = False) -> Simulation:
    """Simulate ``steps`` training steps of ``built`` on fake tensors.

    ``steady_only``: only step 2, after a warm-up that makes the optimizer state
    without step 1's forward and backward (:func:`~neurarch.plan.train.warm_up`);
    half the work, for the batch search, where only the steady state counts.
    """
    setup = setup or TrainSetup()
    setup.validate()
    if setup.mode == "inference":
        from .inference import simulate_inference  # it runs on this module's machinery

        return simulate_inference(built, plan, setup, record_ops=record_ops)
    if not 1 <= steps <= 8:
        raise PlanOptionError(f"steps must be 1 to 8, got {steps}")
    return _with_values(built, lambda values: _simulate(built, plan, setup, steps, record_ops, steady_only, values))


# model -> {(its layer lists' lengths, setup): the model prepared for that setup, on meta, never run}
_PREPARED: "weakref.WeakKeyDictionary[nn.Module, dict]" = weakref.WeakKeyDictionary()
ADAPTED = ("lora", "qlora")


def prepared_copy(model: nn.Module, setup: TrainSetup) -> nn.Module:
    """A meta copy of ``model`` made ready for ``setup``'s step (:func:`~.train.prepare`).

    LoRA and QLoRA: peft's injection (and bitsandbytes' layers) run once per model, per
    length of its layer lists (a model cut short, :func:`neurarch.plan.depth.cut`, is cut
    in place) and per setup; every later run copies that prepared model, a deep copy as
    :func:`~neurarch.fake.convert.meta_copy` makes of any model, instead of injecting again
    (a tenth of a run of a small model).  Nothing runs on the kept model.  The other modes
    prepare a copy each time (a cast)."""
    if setup.mode not in ADAPTED:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return prepare(meta_copy(model), setup)
    shape = tuple(len(m) for m in model.modules() if isinstance(m, nn.ModuleList))
    book = _PREPARED.setdefault(model, {})
    kept = book.get((shape, setup))
    if kept is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kept = book[(shape, setup)] = prepare(meta_copy(model), setup)
    return meta_copy(kept)


def _simulate(built: BuiltModel, plan: InputPlan, setup: TrainSetup, steps: int, record_ops: bool, steady_only: bool, values: bool) -> Simulation:
    model = prepared_copy(built.model, setup)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # type: ignore[operator]  # peft's wrapper's model (found by hasattr); else itself

    def body(tracker: LiveTracker, watch: _Watch) -> None:
        labels = label_specs(base, built.config, plan)  # here: the plan's token counts are resolved by now
        batch = make_batch(plan, labels, setup, real=False, values=watch.values)
        for t in batch.values():
            if isinstance(t, torch.Tensor):
                tracker.register(t, INPUT)
        optimizer = make_optimizer(trainable(model), setup)
        if steady_only:
            # QLoRA's biases, which a real step 1 casts and leaves to step 2 (bitsandbytes casts in place).
            casts = [(life, b) for b in biases_cast_on_first_forward(model) if (life := tracker.life_of(b)) is not None] if setup.mode == "qlora" and CARRY_BACK else []
            with watch.phase(1, "optimizer"):  # step 1's optimizer step alone: it makes the state
                for t in warm_up(optimizer, trainable(model), setup.zero_grad_set_to_none):
                    tracker.mark(t, OPTIMIZER)
            train(model, batch, optimizer, setup, 1, watch, device_type="cpu", first_step=2)
            if setup.zero_grad_set_to_none:
                tracker.forget(_state_of(optimizer, watch.without_gradient))
            # Step 2 as a real one runs it: each bias cast in this run's forward there from the
            # start (made in step 1), the fp32 one gone before step 2 began.
            carried.extend(tracker.carry_back(casts, step=1))
        else:
            train(model, batch, optimizer, setup, steps, watch, device_type="cpu")

    carried: list[Carried] = []
    tracker, watch = _run(model, setup, body, plan, record_ops, values)
    lives = tracker.lives
    starts: dict = {}
    for ev, step, ph in watch.phase_starts:  # the first micro-batch's start; the one optimizer step's end
        starts.setdefault((step, ph), ev)
    windows = tuple((starts.get((s, "forward"), 0), starts.get((s, "end-optimizer"), tracker.events)) for s in ([2] if steady_only else range(1, steps + 1)))
    step_peaks = [_peak_of(lives, lo, hi) for lo, hi in windows]
    # The rounded replay of the steady part (step 2 on), for peak_bytes.
    steady = ((starts.get((2 if steady_only else min(2, steps), "forward"), 0), tracker.events),)
    rounded = _replay(lives, *steady[0], cuda_round)[0]
    sim = Simulation(setup, 1 if steady_only else steps, max(step_peaks, key=lambda p: p.bytes), step_peaks, sum(p.numel() for p in trainable(model)), _count(model), lives)
    sim.rounded_bytes = rounded
    sim.windows = (windows, steady)
    sim.ops = tracker.ops
    last = 2 if steady_only else steps
    sim.forward_end = starts.get((last, "end-forward"))
    sim.carried = tuple(carried)
    if steady_only:
        optimizer_at = starts.get((2, "optimizer"), tracker.events)
        sim.first_windows = ((windows[0][0], optimizer_at), (optimizer_at, windows[0][1]))
    return sim


def _state_of(optimizer: torch.optim.Optimizer, params: list[nn.Parameter]) -> list[torch.Tensor]:
    """The warm-up's state for ``params``, trainable parameters the step gave no gradient (a
    parameter the forward does not use: DINOv2's ``mask_token`` without a mask, the BERT pooler
    under a sentence embedding).  A real step 1 gives them none: the optimizer skips a parameter
    without a gradient, in step 1 as in step 2, while the warm-up made state for every trainable
    parameter.  Only the storages no other parameter's state shares (bitsandbytes' 8-bit state
    shares its quantization maps).  With the gradients kept between steps (``set_to_none=False``)
    the warm-up's zeroed gradients hide which parameters got none: not called then."""
    if not params:
        return []
    wanted = {id(p) for p in params}
    mine: list[torch.Tensor] = []
    shared: set[int] = set()
    for p, state in optimizer.state.items():
        for t in state.values():
            if isinstance(t, torch.Tensor):
                if id(p) in wanted:
                    mine.append(t)
                else:
                    shared.add(id(t.untyped_storage()))
    return [t for t in mine if id(t.untyped_storage()) not in shared]


def first_step_derivable(setup: TrainSetup) -> bool:
    """Whether a steady-state run (step 2 after the warm-up, ``steady_only``) can give the
    first step's peak too (:func:`first_step_bytes`): training with torch's Adam or AdamW
    (foreach, per-tensor or fused), whose warm-up makes the state exactly as step 1's
    ``optimizer.step()`` makes it (:func:`~.train.warm_up`), with the gradients set to None
    between steps, so that step 2 starts as step 1 did but for that state (and for what the
    run carried back: QLoRA's biases, which step 1 casts where the run cast them)."""
    return setup.mode != "inference" and setup.optimizer in ("adamw", "adamw-fused") and setup.zero_grad_set_to_none


def leaves_nothing(lives: list[Life], step: int = 2) -> bool:
    """Whether no storage made in ``step`` outlives the run (a model that keeps something from
    its first step, a cache made once, would start its second step otherwise than its first)."""
    return not any(x.step == step and x.end is None for x in lives)


def first_step_bytes(sim: Simulation) -> int | None:
    """The first step's peak, read off a steady-state run; None where it cannot be.

    The run is step 2 after a warm-up that made only the optimizer state (less the state
    of the parameters step 2 gave no gradient, which no real step makes: :func:`_state_of`).
    Where step 2 leaves nothing behind (:func:`leaves_nothing`) and the recipe is one whose step 1
    starts as step 2 does but without that state (:func:`first_step_derivable`), a
    two-step run's step 1 makes the same storages at the same ops as step 2:

    * during its forward and backward (up to its optimizer step) the state is not
      there yet: the live bytes are step 2's less the state's storages;
    * in its optimizer step Adam's ``_init_group`` first makes the state (only
      allocations, and nothing is freed in ``step()`` before it: torch/optim/adamw.py),
      reaching the bytes step 2 holds as its optimizer step starts; then the update
      runs on the same storages as in step 2: the same live bytes.

    So the first step's peak is the larger of step 2's forward-and-backward peak
    without the state and its optimizer step's peak from its start (the event it
    started at included), as :func:`_peak_of` reads a step's peak (every event in
    the window).

    A QLoRA run whose 4-bit layers have a bias casts those biases in its forward, as step 1
    does (bitsandbytes casts in place, once); the run carries them back to step 1 for its
    own figures (step 2's, :func:`_simulate`).  Step 1 is read off the run as it ran, casts
    and all (:func:`~.tracker.uncarried`): its storages are step 1's plus the state."""
    if sim.first_windows is None or not first_step_derivable(sim.setup) or not leaves_nothing(sim.lives):
        return None  # (no windows: not a steady-state run)
    lives = uncarried(sim.lives, sim.carried)  # QLoRA's biases: step 1 casts them where the run did
    (lo, mid), (_, hi) = sim.first_windows
    before = _replay([x for x in lives if x.role != OPTIMIZER], lo, mid)[0]
    during = _replay(lives, mid, hi)[0]
    return max(before, live_at(lives, mid), during)


def live_at(lives: list[Life], event: int) -> int:
    """The bytes alive right after ``event``."""
    return sum(x.nbytes for x in lives if x.start <= event and (x.end is None or x.end > event))


def _count(model: nn.Module) -> int:
    return sum({id(p): p.numel() for p in model.parameters()}.values())
