"""Run the forward and backward pass of a built model on fake tensors."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import torch
from torch import nn

from ..errors import TraceTimeout
from ..fake.tensors import ValueMode, new_mode, quiet_fake_logs, to_fake
from ..fake.views import fast_fake
from ..inputs import InputPlan
from .cut import Repeats, as_tuple, cut_to, extend
from .loss import loss_of
from .recorder import FunctionalOps, Recorder, first_tensor


@dataclass
class PassOutcome:
    ok: bool
    error: str | None = None
    module: str | None = None
    seconds: float = 0.0


@dataclass
class TraceResult:
    recorder: Recorder
    forward: PassOutcome
    backward: PassOutcome | None
    unused_parameters: list[str] = field(default_factory=list)
    output_shape: tuple[int, ...] | None = None
    # The fake mode and known values of this trace: later passes over the same fake model
    # run under ``values.running()`` with ``plan.make(values)``.
    values: ValueMode | None = None
    # Ops whose weight-dependent outputs were taken as seeded noise to decide data-dependent
    # control flow (MoE routing, predicted durations): op name -> count.  Empty: none.
    guessed_values: dict[str, int] = field(default_factory=dict)


def _describe(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if len(msg) > 300:
        msg = msg[:297] + "..."
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


def _forward(model: nn.Module, plan: InputPlan, mode, values, backward: bool, t0: float):
    """One forward pass with fresh hooks: (recorder, output, outcome)."""
    rec = Recorder(model)
    out = None
    try:
        with warnings.catch_warnings(), values.running(), FunctionalOps(rec):
            warnings.simplefilter("ignore")
            inputs = plan.make(values)
            with torch.set_grad_enabled(backward):
                out = model(**inputs)
        fwd = PassOutcome(True, seconds=time.perf_counter() - t0)
    except TraceTimeout:  # the time limit ends the whole trace, not this pass: no fallback runs after it
        raise
    except Exception as e:  # a model that fails its forward pass is a result, not a crash
        fwd = PassOutcome(False, _describe(e), rec.failed_in, time.perf_counter() - t0)
    finally:
        rec.remove()
    return rec, out, fwd


def _backward(out, values) -> PassOutcome:
    t1 = time.perf_counter()
    loss = loss_of(out, every_output=True)
    if loss is None:
        return PassOutcome(False, "the forward output has no floating tensor that requires grad")
    try:
        with warnings.catch_warnings(), values.running():
            warnings.simplefilter("ignore")
            loss.backward()
        return PassOutcome(True, seconds=time.perf_counter() - t1)
    except TraceTimeout:
        raise
    except Exception as e:
        return PassOutcome(False, _describe(e), None, time.perf_counter() - t1)


def _unused(model: nn.Module) -> list[str]:
    """The parameters that got no gradient (each once, in the model's order); every gradient cleared."""
    out = []
    seen: set[int] = set()
    for name, p in model.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        if p.requires_grad and p.grad is None:
            out.append(name)
        p.grad = None
    return out


def _by_cut(model: nn.Module, plan: InputPlan, mode, values: ValueMode, rep: tuple[Repeats, ...]) -> TraceResult | None:
    """The trace of ``model`` from two traces of it cut to 2 and 3 repeats of its layer
    lists ``rep`` (:mod:`.cut`), or None where they do not show the full depth's (trace it whole).
    The cut runs have their own value mode: a model that guesses values is traced whole,
    and the whole trace's guesses are then its own."""
    runs = []
    for units in (2, 3):
        own = ValueMode(mode)
        with cut_to(model, rep, units):
            rec, out, fwd = _forward(model, plan, mode, own, True, time.perf_counter())
            if not fwd.ok:
                _unused(model)
                return None
            t = first_tensor(out)
            shape = tuple(int(d) for d in t.shape) if t is not None else None
            bwd = _backward(out, own)
            del out
            unused = _unused(model)
        if not bwd.ok or own.guessed:
            return None
        runs.append((rec, fwd, bwd, unused, shape))
    (rec2, fwd2, bwd2, unused2, shape2), (rec3, fwd3, bwd3, unused3, shape3) = runs
    full = extend(model, rep, rec2.events, rec3.events, unused2, unused3) if shape2 == shape3 else None
    if full is None:
        return None
    rec3.events = full[0]
    forward = PassOutcome(True, seconds=fwd2.seconds + fwd3.seconds)
    back = PassOutcome(True, seconds=bwd2.seconds + bwd3.seconds)
    return TraceResult(rec3, forward, back, unused_parameters=full[1], output_shape=shape3, values=values, guessed_values=values.guessed)


@fast_fake()
def trace(model: nn.Module, plan: InputPlan, *, backward: bool = True, repeats: Repeats | tuple[Repeats, ...] | None = None) -> TraceResult:
    """Trace forward (and backward) on fake tensors, in the model's mode (eval, as built).

    ``repeats``: a layer list of identical repeats, or several that repeat as many times
    (``neurarch.plan.depth`` finds them): traced cut to 2 and 3 of them, the full depth's layer table read off those two
    traces where they show it exactly (:mod:`.cut`), else traced whole.

    A model whose backward pass refuses to run outside training mode (Reformer's reversible
    layers: "use model.train()") is traced again in training mode, and ``plan.how`` says so.
    FakeTensor's cache keys and views are neurarch's equals of torch's (:func:`neurarch.fake.views.fast_fake`:
    the same keys and views, sooner).
    """
    quiet_fake_logs()
    mode = new_mode()
    values = ValueMode(mode)
    to_fake(model, mode)
    t0 = time.perf_counter()
    # ValueMode is entered inside the fake mode so it sees each op first.
    with warnings.catch_warnings(), values.running():
        warnings.simplefilter("ignore")
        plan.resolve(model, values)  # before the hooks: its probe is not part of the trace
    # A layout the cut model runs the whole model runs too (the same layers): the alternatives wait for a failure.
    reps = as_tuple(repeats)
    if reps and all(r.units > 3 for r in reps) and len({r.units for r in reps}) == 1 and backward:
        done = _by_cut(model, plan, mode, values, reps)
        if done is not None:
            return done
    rec, out, fwd = _forward(model, plan, mode, values, backward, t0)
    # The planner may offer another layout for some inputs (audio bins/frames first):
    # try it when the first choice fails, keep the first error if it fails too.
    for alt in list(plan.alternatives) if not fwd.ok else []:
        first = (list(plan.tensors), list(plan.how))
        plan.use(alt)
        rec2, out2, fwd2 = _forward(model, plan, mode, values, backward, time.perf_counter())
        if fwd2.ok:
            rec, out, fwd = rec2, out2, fwd2
            break
        plan.tensors, plan.how = first
    result = TraceResult(rec, fwd, None, values=values, guessed_values=values.guessed)  # the dict fills in live
    t = first_tensor(out) if out is not None else None
    if t is not None:
        result.output_shape = tuple(int(d) for d in t.shape)
    if not fwd.ok or not backward:
        return result

    result.backward = _backward(out, values)
    if not result.backward.ok and not model.training and "model.train()" in (result.backward.error or ""):
        for p in model.parameters():
            p.grad = None  # what the failed pass left
        model.train()
        try:
            rec2, out2, fwd2 = _forward(model, plan, mode, values, backward, time.perf_counter())
            bwd2 = _backward(out2, values) if fwd2.ok else None
        finally:
            model.eval()
        if bwd2 is not None and bwd2.ok:
            result.recorder, result.forward, result.backward = rec2, fwd2, bwd2
            plan.how.append("traced in training mode (its backward pass refuses eval mode)")
    if not result.backward.ok:
        return result
    result.unused_parameters = _unused(model)
    return result
