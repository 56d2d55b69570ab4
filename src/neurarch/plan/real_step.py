"""Measure a real training step's memory on CPU, at the allocator.

The simulator's figures are only worth what their check is worth, so the
check is a measurement that owes nothing to the simulator: PyTorch's CPU
allocator reports every allocation and free to the profiler
(``torch.profiler.profile(profile_memory=True)``; c10's
``ProfiledCPUMemoryReporter``), with its size in bytes.  We replay those
events in time order; the running sum's maximum, plus what was alive before
the window opened (weights, buffers, the batch: the sum of their storages),
is the measured peak.  (The reporter only knows blocks it saw allocated, so
a free of an older block is no event: the baseline must, and does, stay
alive through the window.)  Kernel-internal buffers that never become tensors
(oneDNN scratchpads, for instance) are allocator events too, so they are in
the measurement although a simulation of tensors cannot see them.

:func:`allocator_peak` is validated in ``tests/plan/test_memory_measure.py``
against tensors of known size.
"""

from __future__ import annotations

import contextlib
import gc
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import torch
from torch import nn

from ..inputs import InputPlan
from .train import Observer, TrainSetup, label_specs, make_batch, make_optimizer, prepare, quantize_4bit, train, trainable

_PHASE_PREFIX = "neurarch:"


@dataclass
class AllocatorTrace:
    """Allocation (+) and free (-) events of the CPU allocator, in time order."""

    events: list[tuple[int, int, int]]  # (time ns, bytes, address)
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # record_function name -> (start, end) ns

    def peak(self, baseline: int = 0, start: int | None = None, end: int | None = None) -> tuple[int, int | None]:
        """(peak bytes, time of the peak) within [start, end); baseline = bytes alive before the window."""
        live = baseline
        best, when = baseline, None
        for t, n, _ in self.events:
            if end is not None and t >= end:
                break
            live += n
            if (start is None or t >= start) and live > best:
                best, when = live, t
        return best, when


def _walk(nodes) -> Iterator:
    stack = list(nodes)
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children)


@contextlib.contextmanager
def allocator_events() -> Iterator[list[AllocatorTrace]]:
    """Record CPU allocator events inside the block; the trace is in ``box[0]`` after it."""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    box: list[AllocatorTrace] = []
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=False, with_stack=False) as prof:
        yield box
    events: list[tuple[int, int, int]] = []
    ranges: dict[str, tuple[int, int]] = {}
    for node in _walk(prof.profiler.kineto_results.experimental_event_tree()):
        if node.tag == _EventType.Allocation:
            f = node.extra_fields
            if f.device.type == "cpu":
                events.append((node.start_time_ns, int(f.alloc_size), int(f.ptr)))
        elif node.name.startswith(_PHASE_PREFIX):
            # A phase that runs more than once in a step (forward/backward of accumulated
            # micro-batches) spans from its first start to its last end.
            name = node.name[len(_PHASE_PREFIX) :]
            a, b = ranges.get(name, (node.start_time_ns, node.end_time_ns))
            ranges[name] = (min(a, node.start_time_ns), max(b, node.end_time_ns))
    events.sort(key=lambda e: e[0])
    box.append(AllocatorTrace(events, ranges))


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages under ``tensors`` (shared ones once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        st = t.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


class _Marks(Observer):
    @contextlib.contextmanager
    def phase(self, step: int, name: str):
        with torch.profiler.record_function(f"{_PHASE_PREFIX}{step}:{name}"):
            yield


@dataclass
class Measurement:
    peak_bytes: int  # the whole run's allocator peak, baseline included
    baseline_bytes: int  # weights, buffers and the batch before the first step
    step_peaks: list[int]  # per step
    phase: str | None  # "2:backward": step and phase of the peak
    threads: int
    # The trainable parameters the optimizer made no state for in the run (their gradient stayed None:
    # the forward does not use them), by name, each as a meta tensor of its shape and dtype.
    without_state: dict[str, torch.Tensor] = field(default_factory=dict)


def measure_cpu(
    make_model: Callable[[], nn.Module],
    cfg,
    plan: InputPlan,
    setup: TrainSetup,
    *,
    steps: int = 2,
    seed: int = 0,
    threads: int | None = 1,
    onednn: bool = True,
) -> Measurement:
    """Run ``steps`` real training steps on CPU with random weights; measure the allocator peak.

    ``make_model`` builds the real module (random weights) on CPU.  ``threads``
    pins torch's intra-op threads (1 by default: some CPU kernels size their
    scratch per thread).  ``setup.device == "cuda"`` runs the optimizer CUDA
    would run (multi-tensor), on CPU; the kernels themselves are CPU's.
    ``onednn=False`` runs PyTorch's native CPU kernels instead of oneDNN's,
    whose convolutions reorder activations into blocked layouts in scratch
    buffers the size of an activation (CPU-only memory that is no tensor).
    """
    old_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        torch.manual_seed(seed)
        base = make_model()
        labels = label_specs(base, cfg, plan)
        model = prepare(base, setup)
        quantized = quantize_4bit(model, seed) if setup.mode == "qlora" else []
        batch = make_batch(plan, labels, setup, real=True, seed=seed)
        optimizer = make_optimizer(trainable(model), setup)
        gc.collect()
        tensors = [v for v in batch.values() if isinstance(v, torch.Tensor)]
        baseline = storage_bytes([*model.parameters(), *model.buffers(), *quantized, *tensors])
        gc.disable()
        try:
            with torch.backends.mkldnn.flags(enabled=onednn), allocator_events() as box:
                train(model, batch, optimizer, setup, steps, _Marks(), device_type="cpu")
        finally:
            gc.enable()
        trace = box[0]
        peak, when = trace.peak(baseline)
        step_peaks = []
        phase = None
        for s in range(1, steps + 1):
            start = trace.ranges.get(f"{s}:forward", (None, None))[0]
            end = trace.ranges.get(f"{s}:optimizer", (None, None))[1]
            step_peaks.append(trace.peak(baseline, start, end)[0])
        if when is not None:
            for name, (a, b) in trace.ranges.items():
                if a <= when <= b:
                    phase = name
        return Measurement(peak, baseline, step_peaks, phase, torch.get_num_threads(), _without_state(model, optimizer))
    finally:
        torch.set_num_threads(old_threads)


def _without_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    return {n: torch.empty_like(p, device="meta") for n, p in model.named_parameters() if p.requires_grad and p not in optimizer.state}


def measure_cuda(
    make_model: Callable[[], nn.Module],
    cfg,
    plan: InputPlan,
    setup: TrainSetup,
    *,
    steps: int = 2,
    seed: int = 0,
) -> Measurement:
    """The same steps on a CUDA card; peak from the caching allocator's own
    statistics (``torch.cuda.max_memory_allocated``, per step after a reset).

    Comparable to ``peak_bytes`` minus the CUDA context (which the allocator
    does not see).  Not exercised in this repository's tests: they run where
    there is no GPU.
    """
    if not torch.cuda.is_available():
        from .train import PlanOptionError

        raise PlanOptionError("--device cuda needs a CUDA GPU; this torch sees none")
    dev = torch.device("cuda")
    torch.manual_seed(seed)
    base = make_model()
    labels = label_specs(base, cfg, plan)
    model = prepare(base, setup).to(dev)
    quantized = quantize_4bit(model, seed) if setup.mode == "qlora" else []
    batch = {k: v.to(dev) if isinstance(v, torch.Tensor) else v for k, v in make_batch(plan, labels, setup, real=True, seed=seed).items()}
    optimizer = make_optimizer(trainable(model), setup)
    del quantized
    gc.collect()
    torch.cuda.synchronize()
    baseline = torch.cuda.memory_allocated(dev)
    step_peaks: list[int] = []

    started: set[int] = set()

    class _Reset(Observer):
        @contextlib.contextmanager
        def phase(self, step: int, name: str):
            if name == "forward" and step not in started:  # a step's first micro-batch
                started.add(step)
                torch.cuda.synchronize()
                if step_peaks or step > 1:
                    step_peaks.append(torch.cuda.max_memory_allocated(dev))
                torch.cuda.reset_peak_memory_stats(dev)
            yield

    train(model, batch, optimizer, setup, steps, _Reset(), device_type="cuda")
    torch.cuda.synchronize()
    step_peaks.append(torch.cuda.max_memory_allocated(dev))
    return Measurement(max(step_peaks), baseline, step_peaks, None, torch.get_num_threads(), _without_state(model, optimizer))


def real_factory(built, source=None) -> Callable[[], nn.Module]:
    """How to build ``built``'s model with real (random) weights on CPU.

    A source with a factory (timm, torchvision, python:) is called again
    outside the meta device; a transformers model is its class built from the
    same config.  Returns a callable, so each measurement gets a fresh model.
    """
    if source is not None and getattr(source, "factory", None) is not None:

        def make() -> nn.Module:
            m = source.factory()
            return getattr(m, "model", m)  # a factory may return a BuiltModel

        return make
    if built.config is not None:
        cls, cfg = type(built.model), built.config

        def make() -> nn.Module:
            with torch.device("cpu"):
                return cls(cfg)

        return make
    from .train import PlanOptionError

    raise PlanOptionError(f"{built.model_class}: no config or factory to build real weights from")


def measure_model(built, plan: InputPlan, setup: TrainSetup, *, device: str = "cpu", source=None, steps: int = 2) -> Measurement:
    """``measure MODEL --device cpu|cuda``: real random weights, ``steps`` real training steps."""
    make = real_factory(built, source)
    if device == "cuda":
        return measure_cuda(make, built.config, plan, setup, steps=steps)
    return measure_cpu(make, built.config, plan, setup, steps=steps)
