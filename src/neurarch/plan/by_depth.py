"""Deep models: two runs with the layer stack cut short, extrapolated op by op
(the arithmetic and its checks are :mod:`.depth`), else the whole model."""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import math
import re
import weakref
from dataclasses import dataclass
from fractions import Fraction

from torch import nn

from ..build import BuiltModel
from ..inputs import InputPlan
from . import depth
from .inference import simulate_inference
from .overhead import cuda_round
from .simulation import Peak, Simulation, category, first_step_bytes, first_step_derivable, leaves_nothing, live_at, refigured, simulate
from .tracker import GRADIENT, INPUT, OPTIMIZER, WEIGHTS, Life, uncarried
from .train import PlanOptionError, TrainSetup

# --------------------------------------------------------------------------
# Deep models: two cut runs, extrapolated (neurarch.plan.depth)
# --------------------------------------------------------------------------

_NO_CUT: "weakref.WeakKeyDictionary[nn.Module, dict]" = weakref.WeakKeyDictionary()  # model -> {(mode, ...): why}
_WHOLE_IS_CHEAPER: "weakref.WeakKeyDictionary[nn.Module, set]" = weakref.WeakKeyDictionary()  # model -> {setup}
_UNITS: "weakref.WeakKeyDictionary[nn.Module, dict]" = weakref.WeakKeyDictionary()  # model -> {setup: the cut that lined up}
CUT_UNITS = (2, 3)
# Where the two runs at 2 and 3 repeats do not line up, 3 and 4, if they cost less than
# the whole model: at 2 repeats the second repeat is also the last, and in training the
# last repeat to run forward is the first in backward, which alone makes the gradient
# buffer that every other repeat adds to (an encoder output every decoder layer reads,
# T5's position bias every block reads); at 3 and 4 the second repeat is a middle one.
LATER_UNITS = (3, 4)


stack_of = depth.stack_of


def simulate_by_depth(
    built: BuiltModel,
    plan: InputPlan,
    setup: TrainSetup,
    *,
    steps: int = 2,
    context_len: int | None = None,
    steady_only: bool = False,
    units: tuple[int, int] = CUT_UNITS,
    input_batch: bool = False,
) -> Simulation | None:
    """The simulation of ``built`` from two runs with its layer stack (its stacks that
    repeat as many times, see depth.find_stacks) cut short to ``units`` repeats, or None
    when the model has no stack worth cutting.  Raises depth.NotRepeating when the two
    runs do not line up op by op (then simulate the whole model); its ``ops`` are the
    two runs' op counts.

    ``input_batch`` (with ``steady_only``): the plan's input batch, whose first step is
    read off the steady state where it can be (``Simulation.first_derived``, see
    :func:`_first_from_points`); its runs become the checks' first references, as an
    input batch's two-step runs did (:func:`_learn_steady`).

    At a later batch of the same runs (a card's check) only the run at ``units[0]``
    repeats is simulated when it lies, storage by storage, on the lines through two
    earlier batches (or the parabolas through three): then the run at ``units[1]`` is
    read off its own curves (:func:`_predict`); otherwise it is simulated too."""
    stacks = depth.stacks_of(built.model)
    if not stacks or stacks[0].units <= units[1]:
        return None
    ua, ub = units
    # A steady-state check keeps step 2 alone (steady_view): every figure it gives is read there,
    # and the input batch's two-step run, seen the same way, is one more batch on its lines.
    steady = steady_only and setup.mode != "inference"
    family = _family(plan, setup, steps, context_len, steady_only, units)
    refs = _REFS.setdefault(built.model, {}).setdefault(family, {})
    # Keyed before the runs: the first simulation of a plan resolves its token counts, which marks it.
    checks = _family(plan, setup, steps, context_len, True, units)

    def run(u: int) -> _Run:
        # The simulation copies the model it is given first, so it runs on the cut
        # model inside the cut: one copy of the short model, not two.
        with depth.cut(built.model, stacks, u) as short:
            cut = dataclasses.replace(built, model=short)
            if setup.mode == "inference":
                sim = simulate_inference(cut, plan, setup, context_len=context_len, record_ops=True)
            else:
                sim = simulate(cut, plan, setup, steps=steps, record_ops=True, steady_only=steady_only)
        whole = _Run(sim.lives, _ops(sim), sim.steps, sim.trainable_parameters, sim.parameters, sim.kv_cache_bytes, sim.context_len, sim.forward_end)
        whole.optimizer_at = sim.first_windows[1][0] if sim.first_windows is not None else None
        if not steady:
            return whole
        view = steady_view(whole)
        if view is None:
            raise RuntimeError("a steady-state run has no step 2")
        if sim.carried:
            _CARRIES.setdefault(built.model, set()).add(family)
            view.as_ran = steady_view(dataclasses.replace(whole, lives=uncarried(sim.lives, sim.carried)))
        return view

    spans = _SPANS.setdefault(built.model, {}).setdefault(family, {})
    first_refs = not refs
    read = _between(refs, spans, plan.batch)
    line: tuple[int, ...] = ()
    if read is not None:
        ra, rb = read
    else:
        ra = run(ua)
        predicted_run = _predict(refs, plan.batch, ra)
        rb, line = predicted_run if predicted_run is not None else (run(ub), ())
    predicted = read is not None or bool(line)
    pa = depth.points(ra.lives, ra.ops, stacks, ua, category, cuda_round)
    pb = depth.points(rb.lives, rb.ops, stacks, ub, category, cuda_round)
    try:
        try:
            pts = depth.extrapolate(pa, pb, ua, ub, stacks)
        except depth.NotRepeating:
            if not predicted:
                raise
            if read is not None:  # nothing was simulated at this batch: the real runs decide
                ra, read = run(ua), None
                pa = depth.points(ra.lives, ra.ops, stacks, ua, category, cuda_round)
            predicted, line, rb = False, (), run(ub)
            pb = depth.points(rb.lives, rb.ops, stacks, ub, category, cuda_round)
            pts = depth.extrapolate(pa, pb, ua, ub, stacks)
    except depth.NotRepeating as e:
        e.ops = (ra.all_ops, rb.all_ops)
        raise
    if read is not None:
        _READ[0] += 1
    if input_batch:
        if not predicted and first_refs:  # as _learn_steady takes an input batch's two-step runs
            refs[plan.batch] = (ra, rb)
            _INPUT.setdefault(built.model, {})[family] = plan.batch
            _LEARNT[0] += 1
    elif read is not None:
        pass
    elif predicted:
        _PREDICTED[0] += 1
        if plan.batch not in line:  # a third batch on the line through two, a fourth on the parabola through three: see _between
            lo, hi = spans.get(line, (min(line), max(line)))
            spans[line] = (min(lo, plan.batch), max(hi, plan.batch))
    elif len(refs) - (_INPUT.get(built.model, {}).get(family) in refs) < MAX_REFS:  # the input batch's views take no check's place
        refs.setdefault(plan.batch, (ra, rb))
    if not predicted and not steady_only and setup.mode != "inference" and steps == 2:
        _learn_steady(built.model, checks, plan.batch, ra, rb)

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
    n = stacks[0].units
    sim = Simulation(setup, rb.steps, best, step_peaks, depth.line_int(ra.trainable, rb.trainable, ua, ub, n), depth.line_int(ra.parameters, rb.parameters, ua, ub, n))
    sim.rounded_bytes = rounded
    sim.kv_cache_bytes = depth.line_int(ra.kv, rb.kv, ua, ub, n)
    sim.context_len = rb.context_len
    sim.curve = {k: p.rounded for k, p in pts.items() if keep(p.step, p.phase)}
    sim.exact = {k: pts[k].total for k in sim.curve}
    sim.sharded = {k: _shardable(pts[k]) for k in sim.curve}
    sim.lives, sim.forward_end = rb.lives, rb.forward_end  # the larger run's, for the per-layer split
    sim.cut = (stacks, ua, ub)
    sim.cut_ops = (ra.all_ops, rb.all_ops)
    if steady and first_step_derivable(setup) and ra.optimizer_at is not None and rb.optimizer_at is not None and leaves_nothing(ra.lives) and leaves_nothing(rb.lives):
        first = _first_points(ra, rb, pts, stacks, ua, ub, family in _CARRIES.get(built.model, ()))
        if first is not None:
            fa, fb, first_pts = first
            assert fa.optimizer_at is not None and fb.optimizer_at is not None  # (checked by _first_points)
            # The live bytes as the optimizer step starts (step 1's once Adam has made its state), on their line too.
            at_start = depth.line_int(live_at(fa.lives, fa.optimizer_at), live_at(fb.lives, fb.optimizer_at), ua, ub, n)
            sim.first_derived = _first_from_points(first_pts, at_start)
    if len(stacks) == 1:
        stack = stacks[0]
        what = f"the layer stack {stack.describe()} cut to {stack.depth(ua)} and {stack.depth(ub)} layers, and extrapolated to {stack.length}"
    else:
        what = f"the layer stacks {depth.describe(stacks)} each cut to {ua} and {ub} repeats together, and extrapolated to {n}"
    sim.method = f"simulated with {what} (the two runs checked op by op; whole simulations of the catalog models give the same figures, docs/accuracy.md)"
    return sim


def _first_points(ra: _Run, rb: _Run, pts: dict, stacks, ua: int, ub: int, carries: bool) -> tuple[_Run, _Run, dict] | None:
    """The two runs and the extrapolated points the first step is read off: the steady-state
    runs' own, or where their family carries storages back (QLoRA's biases, cast in step 1),
    the runs as they ran them (``_Run.as_ran``), which both must have (None otherwise: a run
    read off its lines has no such view, and then two steps are simulated)."""
    if not carries:
        return ra, rb, pts
    fa, fb = ra.as_ran, rb.as_ran
    if fa is None or fb is None or fa.optimizer_at is None or fb.optimizer_at is None:
        return None
    try:
        return fa, fb, depth.extrapolate(depth.points(fa.lives, fa.ops, stacks, ua, category, cuda_round), depth.points(fb.lives, fb.ops, stacks, ub, category, cuda_round), ua, ub, stacks)
    except depth.NotRepeating:
        return None


def _first_from_points(pts: dict, at_start: int) -> int | None:
    """The first step's peak from a steady-state run's extrapolated points (step 2 alone), as a
    two-step run's would read it (the largest total among step 1's points): at each point of
    step 2's forward and backward the optimizer state is not there yet in step 1, so its bytes
    come off; in the optimizer step step 1 holds what step 2 does once Adam's ``_init_group``
    has made the state, and less before (see :func:`neurarch.plan.simulation.first_step_bytes`).
    ``at_start``: the bytes alive as step 2's optimizer step starts, which step 1 reaches as its
    ``_init_group`` makes the last of the state (a point there, unless the update's first
    allocations continue that stretch: then a higher one, which step 2 has too).  None where
    a point lies elsewhere (a phase between them)."""
    opt = depth.CATEGORIES.index("optimizer")
    best = at_start
    for p in pts.values():
        if p.phase not in ("forward", "backward", "optimizer"):
            return None
        best = max(best, p.total if p.phase == "optimizer" else p.total - p.cats[opt])
    return best


# --------------------------------------------------------------------------
# A later batch: one cut run simulated, the other read off its curves
# --------------------------------------------------------------------------


@dataclass
class _Run:
    """What one cut run leaves: every storage's life, its ops, and its figures that do not depend on the bytes."""

    lives: list[Life]
    ops: list
    steps: int
    trainable: int
    parameters: int
    kv: int | None
    context_len: int | None
    forward_end: int | None
    all_ops: int = -1  # the ops the whole run made (a steady view keeps step 2's): what choosing a cut weighs
    optimizer_at: int | None = None  # a steady-state run's: the event its optimizer step started at
    # A steady view of a run that carried storages back (QLoRA's biases, Simulation.carried): the same
    # run's view as it ran them, which its first step is read off.
    as_ran: "_Run | None" = None

    def __post_init__(self) -> None:
        if self.all_ops < 0:
            self.all_ops = len(self.ops)

    @functools.cached_property
    def shape(self) -> list[tuple]:
        """Each life but its bytes: when it is made, between which ops it is freed, where, and
        what it is.  Storages freed together between two ops (autocast's weight copies when its
        cache is cleared) go in an order that differs from run to run; nothing counts it (the
        live bytes are read at ops), so a free is placed by the op before it, not its event.
        Kept: a reference run is compared with every later batch's."""
        done = [ev for ev, *_ in self.ops]
        return [(x.start, None if x.end is None else bisect.bisect_left(done, x.end), x.step, x.phase, x.module, x.role, x.survives_forward, x.survives_optimizer, x.weight_copy) for x in self.lives]


# model -> {the runs but their batch: {batch: (run at units[0], run at units[1])}}: the first
# batches whose cut runs lined up, both simulated (never a predicted run).  Three, so that a
# batch 1 that runs other ops (a size-1 dimension) still leaves two that line up.
MAX_REFS = 3
_REFS: "weakref.WeakKeyDictionary[nn.Module, dict]" = weakref.WeakKeyDictionary()
_PREDICTED = [0]  # cut runs read off their curves instead of simulated, in this process
# model -> the families (_family) whose runs carried storages back to step 1 (Simulation.carried)
_CARRIES: "weakref.WeakKeyDictionary[nn.Module, set]" = weakref.WeakKeyDictionary()
# model -> {the runs but their batch: {two (three) reference batches: (lo, hi)}}: the smaller cut simulated
# at lo and hi lay on its line through the two (its parabola through the three), storage by storage (see _between).
_SPANS: "weakref.WeakKeyDictionary[nn.Module, dict]" = weakref.WeakKeyDictionary()
_READ = [0]  # batches whose two cut runs were both read off their lines, in this process


def predicted_runs() -> int:
    """How many cut runs this process read off their curves through earlier batches instead of simulating."""
    return _PREDICTED[0]


def read_batches() -> int:
    """How many batches this process read both cut runs of off their lines, simulating neither (:func:`_between`)."""
    return _READ[0]


def _family(plan: InputPlan, setup: TrainSetup, *rest) -> tuple:
    """Everything a cut run depends on but the batch: the same runs at another batch share it."""
    tensors = [dataclasses.replace(t, shape=(-1, *t.shape[1:])) if t.shape and t.shape[0] == plan.batch else t for t in plan.tensors]
    return (repr(dataclasses.replace(plan, batch=-1, tensors=tensors)), setup, *rest)


def _same_runs(*runs: _Run) -> bool:
    """Whether runs at several batches make the same ops and the same storages, at the same events."""
    first = runs[0]
    head = (first.ops, first.steps, first.trainable, first.parameters, first.context_len, first.forward_end)
    if any((r.ops, r.steps, r.trainable, r.parameters, r.context_len, r.forward_end) != head for r in runs[1:]):
        return False
    return all(r.shape == first.shape for r in runs[1:])


def _weights(batches: list[int], c: int) -> tuple[tuple[int, ...], int]:
    """Lagrange's weights: the value at batch ``c`` of the polynomial through values at ``batches`` is
    their sum weighted by these (a line through two batches, a parabola through three).  Given as
    whole numbers over one positive denominator ``d``: the value is ``sum(w * y) / d``, exactly
    (integer arithmetic: a plan reads thousands of storages off these)."""
    ws = [Fraction(math.prod(c - y for y in batches if y != x), math.prod(x - y for y in batches if y != x)) for x in batches]
    d = math.lcm(*(w.denominator for w in ws))
    return tuple(w.numerator * (d // w.denominator) for w in ws), d


def _value(ws: tuple[tuple[int, ...], int], ys) -> Fraction | None:
    nums, d = ws
    if any(y is None for y in ys):
        return None
    return Fraction(sum(w * y for w, y in zip(nums, ys)), d)


def _on_curves(ws: tuple[tuple[int, ...], int], runs: list[_Run], run: _Run) -> bool:
    """Whether every storage of ``run`` (the same storages as ``runs``', in order) has the bytes its
    curve through ``runs`` gives at the weighted batch, and its KV cache too."""
    nums, d = ws
    if _value(ws, [r.kv for r in runs]) != run.kv:
        return False
    cols = [r.lives for r in runs]
    if len(nums) == 2:
        w0, w1 = nums
        return all(w0 * a.nbytes + w1 * b.nbytes == d * c.nbytes for a, b, c in zip(*cols, run.lives))
    return all(sum(w * x.nbytes for w, x in zip(nums, group)) == d * c.nbytes for *group, c in zip(*cols, run.lives))


def _predict(refs: dict, batch: int, ra: _Run) -> tuple[_Run, tuple[int, ...]] | None:
    """The run at the larger cut at ``batch``, read off the curves through the reference
    batches, and those batches; or None (simulate it).

    Every storage's bytes are a sum of tensor sizes, each a product of dimensions of which
    only the batch changes: a line in the batch, as long as the model runs the same ops
    (a parabola where two dimensions are the batch: CLIP's batch-by-batch similarities).
    The smaller cut's run at this batch was simulated; it must make the same ops and
    storages at the same events as at the reference batches, each storage's bytes on its
    curve through them: a line through two of them, else a parabola through three (a
    model that runs other ops at this batch, or whose sizes grow otherwise, fails here).
    Then the larger cut's run, which differs from it only by one more repeat of the same
    layers, is its own references' curves at this batch."""
    if batch in refs:
        return None
    known = sorted(refs.items(), reverse=True)
    for chosen in [*itertools.combinations(known, 2), *itertools.combinations(known, 3)]:
        small, large = [r[1][0] for r in chosen], [r[1][1] for r in chosen]
        if not (_same_runs(*small, ra) and _same_runs(*large)):
            continue
        ws = _weights([b for b, _ in chosen], batch)
        if _on_curves(ws, small, ra):
            rb = _read_off(ws, large)
            return None if rb is None else (rb, tuple(b for b, _ in chosen))
    return None


def _between(refs: dict, spans: dict, batch: int) -> tuple[_Run, _Run] | None:
    """Both cut runs at ``batch`` read off their lines, nothing simulated; or None (simulate).

    ``spans``: {two reference batches: (lo, hi)}, where the smaller cut was simulated at
    ``lo`` and ``hi`` too (as a later batch's check) and lay there, storage by storage, on
    its line through the two.  A storage's bytes are a polynomial in the batch with
    nonnegative coefficients (a sum of tensor sizes, each a product of dimensions), so
    convex; a convex function that meets a line at three batches follows it between the
    outer two.  Or {three reference batches: (lo, hi)}, where a fourth simulated batch lay
    on the parabola through the three (CLIP's batch-by-batch similarities): such a
    polynomial minus a parabola has at most three changes of sign in its coefficients
    (the constant, linear and square terms, then the nonnegative rest), so by Descartes'
    rule of signs at most three positive roots unless it is zero; meeting the parabola at
    four batches, it is the parabola.  So, where the model runs the same ops at every batch from ``lo`` to ``hi``
    (it does at the batches simulated; the batch search has always assumed it of the batch
    after the one it checks, :func:`neurarch.plan.fit._next_cannot_fit`), each storage of
    the smaller cut at a batch in between is its curve's value there, exactly; the larger
    cut's run is read off its own curves, as in :func:`_predict`."""
    if batch in refs:
        return None
    for pair, (lo, hi) in spans.items():
        if lo <= batch <= hi:
            ws = _weights(list(pair), batch)
            ra = _read_off(ws, [refs[b][0] for b in pair])
            rb = _read_off(ws, [refs[b][1] for b in pair])
            if ra is not None and rb is not None:
                return ra, rb
    return None


def _read_off(ws: tuple[tuple[int, ...], int], runs: list[_Run]) -> _Run | None:
    """The run at the weighted batch, each storage's bytes on its curve through ``runs``; None where
    one is not a whole, nonnegative number of bytes."""
    last = runs[-1]
    nums, d = ws
    lives = []
    for group in zip(*(r.lives for r in runs)):
        n, rest = divmod(sum(w * x.nbytes for w, x in zip(nums, group)), d)
        if rest or n < 0:
            return None
        lives.append(group[-1].resized(n))
    kv = _value(ws, [r.kv for r in runs])
    if last.kv is not None and (kv is None or kv.denominator != 1 or kv < 0):
        return None
    return _Run(lives, last.ops, last.steps, last.trainable, last.parameters, None if kv is None else int(kv), last.context_len, last.forward_end, last.all_ops, last.optimizer_at)


# --------------------------------------------------------------------------
# The steady state: step 2 alone, whichever run it came from
# --------------------------------------------------------------------------

_BEFORE_ROLE = {"weights": WEIGHTS, "gradients": GRADIENT, "optimizer": OPTIMIZER, "activations": INPUT, "temporary": None}
_CAT_ORDER = {c: i for i, c in enumerate(("weights", "gradients", "optimizer", "activations", "temporary"))}


def steady_view(run: _Run) -> _Run | None:
    """Step 2 of a training run alone, or None when it has no step 2: its ops, the storages
    made in it, and those alive when it starts, which lose where they were made (step 1 or
    the steady-state warm-up) and keep only their category (what the figures read of them).

    Events count from the last op before step 2.  Every figure of step 2 is the same read
    in the view as in the run (:func:`depth.points` reads the bytes alive at each op, the
    allocations since the op before, and frees only relative to other frees): a storage
    made before step 2 and freed before its first op is never alive at one, and one alive
    when it starts counts at each of its ops until its free, as before.  So a steady-state check
    (step 2 after a warm-up that only makes the optimizer state) and the input batch's
    two steps, where step 1 leaves the same state, give the same view when step 1 leaves
    nothing else, and then the input batch is one more batch on the checks' lines
    (:func:`_learn_steady`); where it leaves something else, or the model runs other ops,
    the views differ and nothing is shared (:func:`_same_runs`)."""
    at = _step_2(run.ops)
    if at is None:
        return None
    k, base = at
    ops = [(ev - base, step, phase, module) for ev, step, phase, module in run.ops[k:]]
    done = [op[0] for op in ops]
    before: list[tuple[tuple, Life]] = []
    after: list[Life] = []
    for x in run.lives:
        end = None if x.end is None else x.end - base
        if x.start > base:
            after.append(x.moved(x.start - base, end))
            continue
        if end is not None and end <= done[0]:
            continue  # made before step 2 and freed before its first op: never alive at one
        c = category(x)
        # The order they were made in differs (step 1's backward makes gradients in its own
        # order, the warm-up in the parameters'): a canonical one, sizes and frees decide it.
        order = (_CAT_ORDER[c], math.inf if end is None else bisect.bisect_left(done, end), x.nbytes)
        before.append((order, Life(x.nbytes, 0, end, 0, "before", None, _BEFORE_ROLE[c], weight_copy=x.weight_copy)))
    before.sort(key=lambda t: t[0])
    lives = [life for _, life in before] + after
    forward_end = None if run.forward_end is None else run.forward_end - base
    optimizer_at = None if run.optimizer_at is None else run.optimizer_at - base
    return _Run(lives, ops, 1, run.trainable, run.parameters, run.kv, run.context_len, forward_end, run.all_ops, optimizer_at)


def _step_2(ops: list) -> tuple[int, int] | None:
    """Where step 2 starts in a run's ops: the index of its first op, and the event of the op
    before it (0 if none), which a steady view counts its events from; None without a step 2."""
    k = next((i for i, op in enumerate(ops) if op[1] >= 2), None)
    if k is None:
        return None
    return k, (ops[k - 1][0] if k else 0)


def _steady_sim(sim: Simulation) -> Simulation | None:
    """A whole-model training simulation as a steady-state check at its batch: its step-2 peak,
    and its storages, ops and event ranges as :func:`steady_view` sees them, so that the
    read-off of another batch (:func:`_whole_between`) finds the peaks in the same ranges."""
    if sim.windows is None or sim.ops is None:
        return None
    view, at = steady_view(_as_run(sim)), _step_2(sim.ops)
    if view is None or at is None:
        return None
    base = at[1]
    (lo, hi), (rlo, rhi) = sim.windows[0][-1], sim.windows[1][0]
    out = dataclasses.replace(sim, steps=1, peak=sim.steady, step_peaks=[sim.steady], lives=view.lives, ops=view.ops, forward_end=view.forward_end)
    out.windows = (((lo - base, hi - base),), ((rlo - base, rhi - base),))
    if sim.carried:  # the view keeps step 2 as a real one runs it; step 1 is read off the run itself (simulate_mode)
        out.carried, out.first_windows = (), None
    elif sim.first_windows is not None:
        (a, b), (c, d) = sim.first_windows
        out.first_windows = ((a - base, b - base), (c - base, d - base))
    return out


def _learn_steady(model: nn.Module, family: tuple, batch: int, ra: _Run, rb: _Run) -> None:
    """The input batch's two cut runs (two steps each) as steady-state references at their batch:
    their steady views, which a check at that batch would have made (:func:`steady_view`)."""
    refs = _REFS.setdefault(model, {}).setdefault(family, {})
    if refs:  # a check came first (a plan's input batch comes first): nothing to add to
        return
    va, vb = steady_view(ra), steady_view(rb)
    if va is not None and vb is not None:
        refs[batch] = (va, vb)
        _INPUT.setdefault(model, {})[family] = batch
        _LEARNT[0] += 1


# model -> {the checks' family: the input batch whose views are among its references}; batch 1
# runs other ops in most models, so these do not count against MAX_REFS.
_INPUT: "weakref.WeakKeyDictionary[nn.Module, dict]" = weakref.WeakKeyDictionary()


_LEARNT = [0]  # input batches whose two-step runs became steady-state references, in this process


def steady_references() -> int:
    """How many input batches this process took as steady-state references from their two-step runs."""
    return _LEARNT[0]


def _ops(sim: Simulation) -> list:
    """The ops a simulation run with ``record_ops=True`` recorded."""
    if sim.ops is None:
        raise RuntimeError("the simulation recorded no ops although record_ops was asked for")
    return sim.ops


def _shardable(p) -> int:
    """What FSDP divides over the cards at this op: weights, gradients and optimizer
    state, inside the optimizer step its scratch too (it runs on the shards), and
    autocast's low-precision copies of the weights (FSDP's mixed precision gathers
    each layer's low-precision weights when it runs, counted by the caller)."""
    return sum(p.cats[:3]) + (p.cats[4] if p.phase == "optimizer" else 0) + p.copies


def cut_layer(stack: depth.Stack, units: int, i: int) -> int:
    """The layer of a run cut to ``units`` repeats that layer ``i`` of the full stack acts
    like: itself in the head and the first repeat, the second repeat for a middle one,
    the cut run's last repeat for the last, and the tail's own."""
    if i < stack.head:
        return i
    blk, o = divmod(i - stack.head, stack.period)
    if blk >= stack.units:
        return stack.head + units * stack.period + (i - stack.head - stack.units * stack.period)
    if blk == 0:
        return i
    if blk == stack.units - 1:
        return stack.head + (units - 1) * stack.period + o
    return stack.head + stack.period + o


def segment_bytes(model: nn.Module, sim: Simulation, peak: Peak) -> list[tuple[str, int]] | None:
    """What each top-level segment (a layer of the stack, or a module outside it)
    needs on its own card in a pipeline at this batch: its parameters' share of
    the weights, gradients and optimizer state at the steady peak (per element,
    as simulated), plus the activations its forward saved (alive when forward
    ended).  For a cut simulation the layers' activations come from the cut run
    (first, middle and last repeat) and are spread over the full depth."""
    if sim.forward_end is None or not sim.lives:
        return None
    if sim.cut:
        stacks, _, units = sim.cut
    else:
        only = stack_of(model)
        stacks, units = ((only,), only.units) if only else ((), 0)
    stack = stacks[0] if stacks else None
    # Other stacks cut alongside lie outside the first one's segments and are one segment each
    # (depth.find_stacks takes only those); their activations are summed over the full depth.
    others = [(re.compile(re.escape(c.path) + r"\.(\d+)(?:\.|$)"), c) for c in stacks[1:]]
    other_act: dict[tuple[int, int], int] = {}  # (other stack, its layer in the cut run) -> saved activation bytes
    parent = stack.path.rpartition(".")[0] if stack else ""
    depth_out = len(parent.split(".")) + 1 if parent else 1
    prefix = stack.path + "." if stack else None

    def segment(name: str | None) -> str | None:
        if not name:
            return None
        if prefix and name.startswith(prefix):
            return prefix + name[len(prefix) :].split(".")[0]
        return ".".join(name.split(".")[:depth_out])

    ev = sim.forward_end
    act: dict[str, int] = {}
    first_seen: dict[str, int] = {}
    for x in sim.lives:
        seg = segment(x.module)
        if seg is not None and x.phase == "forward":
            first_seen.setdefault(seg, x.start)
        if x.start <= ev and (x.end is None or x.end > ev) and category(x) == "activations" and seg is not None:
            for k, (rx, _) in enumerate(others):
                m = rx.match(x.module or "")
                if m is not None:
                    key = (k, int(m.group(1)))
                    other_act[key] = other_act.get(key, 0) + x.nbytes
                    break
            else:
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
        ran = {j: act.get(f"{prefix}{j}", 0) for j in range(stack.depth(units))}  # the cut run's own layers
        for i in range(stack.length):
            act[f"{prefix}{i}"] = ran[cut_layer(stack, units, i)]
        for k, (_, c) in enumerate(others):
            seg = segment(f"{c.path}.0")
            if seg is not None:
                act[seg] = act.get(seg, 0) + sum(other_act.get((k, cut_layer(c, units, i)), 0) for i in range(c.length))
    order_key: dict[str, float] = {seg: first_seen.get(seg, 1 << 62) for seg in numel}
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


def _whole_is_cheaper(sim: Simulation) -> bool:
    """Whether one run of the whole model makes fewer ops than the two cut runs did.

    A model whose repeated stack is a small part of it (CLIP's vision tower beside
    its text tower, an encoder-decoder's decoder beside its encoder) runs the rest
    of the model in each cut run: there the two runs cost more than one whole
    simulation.  Ops per repeat are the difference between the runs."""
    if sim.cut is None or sim.cut_ops is None:
        return False
    stacks, ua, ub = sim.cut
    return _whole_ops(sim.cut_ops, (ua, ub), stacks[0].units) < sum(sim.cut_ops)


def _whole_ops(ops: tuple[int, int], units: tuple[int, int], n: int) -> float:
    """The ops of one whole run, from two cut runs' op counts (affine in the repeats)."""
    (a, b), (ua, ub) = ops, units
    return a + (b - a) * (n - ua) / (ub - ua)


def _first_units(built: BuiltModel, setup: TrainSetup) -> tuple[int, int]:
    """The cut to try first.  An encoder-decoder in training: LATER_UNITS, when its stacks repeat at
    least twice as often as the larger of them (then the two runs' stacks, 7 repeats, cost less than
    the whole model's without counting the rest).  Every decoder layer adds its gradient for the
    encoder output to one buffer, which the last decoder layer makes: at 2 repeats the second
    repeat is that last layer, and the runs at 2 and 3 repeats do not line up (BART, T5).  Elsewhere
    CUT_UNITS, the cheaper."""
    stacks = depth.stacks_of(built.model)
    if setup.mode != "inference" and getattr(built.config, "is_encoder_decoder", False) and len(stacks) > 1 and stacks[0].units >= 2 * LATER_UNITS[1]:
        return LATER_UNITS
    return CUT_UNITS


# Why a short encoder-decoder trains simulated whole, without trying a cut (see _short_encoder_decoder).
SHORT_ENCODER_DECODER = (
    f"an encoder-decoder in training whose stacks repeat fewer than {2 * LATER_UNITS[1]} times: its runs cut to "
    f"{CUT_UNITS[0]} and {CUT_UNITS[1]} repeats do not line up (in backward a stack's last layer makes the one buffer the others add a "
    f"gradient to: for the encoder output every decoder layer reads, for T5's position bias), and two runs cut to "
    f"{LATER_UNITS[0]} and {LATER_UNITS[1]} repeats make more ops than the whole model"
)


def _short_encoder_decoder(built: BuiltModel, setup: TrainSetup) -> bool:
    """Whether the model is an encoder-decoder in training whose stacks repeat too few times
    for LATER_UNITS to be tried first (:func:`_first_units`).  Its runs at CUT_UNITS do not
    line up (the reason :func:`_first_units` gives; T5, BART), and two runs at LATER_UNITS,
    7 repeats beside the rest of the model twice, make more ops than one whole run of at most
    7 repeats beside the rest once: a cut could only end in a whole simulation, after two or
    four cut runs that cost more than it.  ``tests/plan/test_depth_cut.py`` checks that the
    cut runs of such models do not line up."""
    stacks = depth.stacks_of(built.model)
    return setup.mode != "inference" and getattr(built.config, "is_encoder_decoder", False) and len(stacks) > 1 and CUT_UNITS[1] < stacks[0].units < 2 * LATER_UNITS[1]


def _later_is_cheaper(ops: tuple[int, int], n: int) -> bool:
    """Whether two runs at LATER_UNITS make fewer ops than one whole run, from the op counts at CUT_UNITS."""
    at = [_whole_ops(ops, CUT_UNITS, u) for u in LATER_UNITS]
    return n > LATER_UNITS[1] and sum(at) < _whole_ops(ops, CUT_UNITS, n)


def simulate_mode(
    built: BuiltModel,
    plan: InputPlan,
    setup: TrainSetup,
    *,
    steps: int = 2,
    context_len: int | None = None,
    cut_depth: bool = True,
    steady_only: bool = False,
    input_batch: bool = False,
) -> Simulation:
    """Simulate one mode: by depth when the model has a stack worth cutting, else whole.

    ``input_batch`` (with ``steady_only``, in training): the plan's input batch, simulated
    as a steady-state check is, its first step's peak read off that run where it can be
    (``Simulation.first_derived``: :func:`neurarch.plan.simulation.first_step_bytes`,
    :func:`_first_from_points`), and taken as the checks' first reference, as an input
    batch's two-step run was."""
    input_batch = input_batch and steady_only and setup.mode != "inference"
    why = None
    failed = _NO_CUT.setdefault(built.model, {})
    cheaper = _WHOLE_IS_CHEAPER.setdefault(built.model, set())
    lined_up = _UNITS.setdefault(built.model, {})
    key = setup
    if cut_depth and key in failed:
        why = failed[key]  # it did not line up at another batch: do not try again
    elif cut_depth and key in cheaper:
        pass  # the same figures either way (docs/accuracy.md); the whole model is fewer ops here
    elif cut_depth and _short_encoder_decoder(built, setup):
        why = failed[key] = SHORT_ENCODER_DECODER
    elif cut_depth:
        units = lined_up.get(key) or _first_units(built, setup)
        tried = set()
        sim = None
        while True:
            tried.add(units)
            try:
                sim = simulate_by_depth(built, plan, setup, steps=steps, context_len=context_len, steady_only=steady_only, units=units, input_batch=input_batch)
            except PlanOptionError:
                raise
            except depth.NotRepeating as e:
                stacks = depth.stacks_of(built.model)
                if units == CUT_UNITS and LATER_UNITS not in tried and e.ops is not None and stacks and _later_is_cheaper(e.ops, stacks[0].units):
                    units = LATER_UNITS
                    continue
                if units == LATER_UNITS and CUT_UNITS not in tried:
                    units = CUT_UNITS
                    continue
                why = failed[key] = _why(e)
            except Exception as e:  # the cut model does not run: simulate it whole
                why = failed[key] = _why(e)
            break
        if sim is not None:
            lined_up[key] = units
            if _whole_is_cheaper(sim):
                cheaper.add(key)
            return sim
    book = _WHOLE.setdefault(built.model, {}).setdefault(_family(plan, setup, steps, context_len, steady_only), ({}, {}))
    checks = _family(plan, setup, steps, context_len, True)  # keyed before the run, as in simulate_by_depth
    sim = _whole_between(book, plan.batch)
    ran = sim
    if sim is None:
        if setup.mode == "inference":
            sim = simulate_inference(built, plan, setup, context_len=context_len, record_ops=True)
        else:
            sim = simulate(built, plan, setup, steps=steps, record_ops=True, steady_only=steady_only)
        ran = sim
        if steady_only:  # seen from step 2 on, as every steady-state reference (steady_view)
            sim = _steady_sim(sim) or sim
        if not input_batch:
            _whole_learn(book, plan.batch, sim)
        elif plan.batch not in book[0] and len(book[0]) < 2:  # as an input batch's two-step run's step 2 was taken
            _whole_learn(book, plan.batch, sim)
            _LEARNT[0] += 1
        if not steady_only and setup.mode != "inference" and steps == 2:
            # The input batch's two steps: its step 2 is a steady-state check at its batch.
            as_check = _steady_sim(sim)
            if as_check is not None:
                steady_book = _WHOLE.setdefault(built.model, {}).setdefault(checks, ({}, {}))
                if plan.batch not in steady_book[0] and len(steady_book[0]) < 2:
                    _whole_learn(steady_book, plan.batch, as_check)
                    _LEARNT[0] += 1
    else:
        _READ[0] += 1
    if input_batch:  # a run that carried storages back: read as it ran (its view keeps step 2 alone)
        sim.first_derived = first_step_bytes(ran if ran is not None and ran.carried else sim)
    pts = depth.points(sim.lives, _ops(sim), _NO_STACK, 0, category, cuda_round)
    keep = _steady_filter(setup, pts)
    sim.curve = {k: p.rounded for k, p in pts.items() if keep(p.step, p.phase)}
    sim.exact = {k: pts[k].total for k in sim.curve}
    sim.sharded = {k: _shardable(pts[k]) for k in sim.curve}
    sim.ops = None
    if why:
        sim.method = f"simulated whole (the cut-depth shortcut did not apply: {why})"
    return sim


# model -> {the runs but their batch: ({batch: (its run, its simulation)}, spans as in _SPANS)}: a
# model simulated whole, its first batches and where the lines through two of them were met again.
_WHOLE: "weakref.WeakKeyDictionary[nn.Module, dict]" = weakref.WeakKeyDictionary()


def _as_run(sim: Simulation) -> _Run:
    return _Run(sim.lives, _ops(sim), sim.steps, sim.trainable_parameters, sim.parameters, sim.kv_cache_bytes, sim.context_len, sim.forward_end)


def _whole_learn(book: tuple[dict, dict], batch: int, sim: Simulation) -> None:
    """Keep a whole simulation's run as a reference (the first ones), or, where it lies storage by
    storage on the line through two references, widen their span to its batch (see :func:`_between`)."""
    refs, spans = book
    if batch in refs or sim.windows is None:
        return
    run, kept = _as_run(sim), dataclasses.replace(sim)  # the caller adds its curve to sim
    if len(refs) < 2:
        refs[batch] = (run, kept)
        return
    for pair in itertools.combinations(sorted(refs, reverse=True), 2):
        runs = [refs[b][0] for b in pair]
        if not (_same_runs(*runs, run) and all(refs[b][1].windows == sim.windows for b in pair)):
            continue
        if _on_curves(_weights(list(pair), batch), runs, run):
            lo, hi = spans.get(pair, (min(pair), max(pair)))
            spans[pair] = (min(lo, batch), max(hi, batch))
            return
    if len(refs) < MAX_REFS:
        refs[batch] = (run, kept)


def _whole_between(book: tuple[dict, dict], batch: int) -> Simulation | None:
    """The whole model's simulation at ``batch`` read off its storages' lines, where two reference
    batches and a third simulated one lie on them around it (the argument of :func:`_between`); or None."""
    refs, spans = book
    if batch in refs:
        return None
    for pair, (lo, hi) in spans.items():
        if lo <= batch <= hi:
            run = _read_off(_weights(list(pair), batch), [refs[b][0] for b in pair])
            if run is not None:
                sim = refigured(refs[pair[-1]][1], run.lives, run.kv)
                sim.ops = run.ops
                return sim
    return None


def _why(e: Exception) -> str:
    return str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
