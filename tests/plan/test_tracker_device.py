"""The tracker answers a fake tensor's device and runs the gaps' answers itself: the same run.

``t.device`` on a fake tensor is an op (``prim.device``) that passes through every
dispatch mode down to FakeTensorMode.  The tracker answers it as FakeTensorMode does,
and calls the gaps' handler (neurarch.fake.gaps) in its own instead of having it a mode
of its own below.  The references here are torch's own answer (no tracker) and the
same simulation with every op sent down through every mode, the gaps' one included.
"""

import contextlib

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import neurarch.plan.simulation as simulation
from neurarch.build import build_from_config
from neurarch.fake.gaps import FakeGaps
from neurarch.inputs import InputOptions, plan_inputs
from neurarch.plan.tracker import LiveTracker
from neurarch.plan.train import TrainSetup
from tiny_configs import LLAMA


def test_a_fake_tensor_reports_its_fake_device_under_the_tracker():
    def step(*modes):
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        with mode:
            x = torch.empty(4, 8, requires_grad=True)  # a fake CPU tensor, as the simulation's; its kernels run on meta
        with contextlib.ExitStack() as stack:
            stack.enter_context(mode)
            for m in modes:
                stack.enter_context(m)
            (x * 2).sum().backward()  # autograd's engine asks each gradient's device (in C++)
        return x.grad.device, x.grad.shape

    tracker = _Counting()
    tracker.runs_ops = FakeGaps()  # as a simulation sets it: nothing between the tracker and FakeTensorMode
    assert step(tracker) == step() == (torch.device("cpu"), torch.Size([4, 8]))  # torch's own answer: no tracker; never "meta"
    assert tracker.answered > 0


class _Counting(LiveTracker):
    """The tracker, counting the device queries it answered itself."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.answered = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.prim.device.default and self.runs_ops is not None:
            self.answered += 1
        return super().__torch_dispatch__(func, types, args, kwargs)


def _run(monkeypatch, direct: bool, setup: TrainSetup):
    trackers = []

    class Tracker(_Counting):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            trackers.append(self)

    monkeypatch.setattr(simulation, "LiveTracker", Tracker)
    monkeypatch.setattr(simulation, "DIRECT", direct)
    built = build_from_config(dict(LLAMA), "test")
    plan = plan_inputs(built.model, built.config, InputOptions(batch=2, seq_len=32))
    sim = simulation.simulate(built, plan, setup, record_ops=True)
    (tracker,) = trackers
    return sim, tracker.answered


def test_a_simulation_is_the_same_with_the_tracker_answering_devices_and_running_the_gaps(monkeypatch):
    setups = (
        TrainSetup(mode="full", precision="bf16-mixed"),
        TrainSetup(mode="full", precision="fp32", optimizer="adafactor"),  # reads its step with .item(): the gaps answer it
        TrainSetup(mode="inference"),
    )
    for setup in setups:
        fast, answered = _run(monkeypatch, True, setup)
        slow, none = _run(monkeypatch, False, setup)  # every op down through the gaps' mode to FakeTensorMode
        assert answered > 100 and none == 0
        assert [(x.nbytes, x.start, x.end, x.phase, x.module) for x in fast.lives] == [(x.nbytes, x.start, x.end, x.phase, x.module) for x in slow.lives]
        assert fast.ops == slow.ops
        assert fast.peak == slow.peak and fast.rounded_bytes == slow.rounded_bytes
