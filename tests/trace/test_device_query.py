"""A fake tensor's device query answered by the mode on top (neurarch.fake.tensors.device_query).

The answer must be FakeTensorMode's own, and the trace, the cost count and a memory
simulation must come out the same whether the query is answered on top or goes down
to FakeTensorMode (the shortcut turned off).
"""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode, in_kernel_invocation_manager

import neurarch.cost.counter as counter
import neurarch.fake.tensors as tensors
import neurarch.plan.tracker as tracker
from neurarch.build import build_from_config
from neurarch.cost.estimate import count_step
from neurarch.inputs import InputOptions, plan_inputs
from neurarch.plan.memory import simulate
from neurarch.plan.train import TrainSetup
from neurarch.trace.run import trace
from tiny_configs import LLAMA

DEVICE = torch.ops.prim.device.default


def test_the_answer_is_fake_tensor_modes_own():
    mode = FakeTensorMode()
    with mode:
        t = torch.empty(3, 4, device="cuda")  # a fake CUDA tensor; no GPU needed
    assert tensors.device_query(DEVICE, (t,)) == t.device == torch.device("cuda", 0)
    assert tensors.device_query(torch.ops.aten.add.Tensor, (t, t)) is None  # another op: dispatched
    assert tensors.device_query(DEVICE, (torch.empty(2),)) is None  # a real tensor: dispatched
    with in_kernel_invocation_manager(mode):
        assert tensors.device_query(DEVICE, (t,)) is None  # inside a kernel FakeTensorMode says meta: its own answer


def _run_all():
    built = build_from_config(dict(LLAMA, num_hidden_layers=5), "llama")
    opts = InputOptions(seq_len=32)
    plan = plan_inputs(built.model, built.config, opts)
    sim = simulate(built, plan, TrainSetup(mode="full", precision="bf16-mixed"), record_ops=True)
    result = trace(built.model, plan)  # moves the model to fake tensors
    rows = [(e.kind, e.name, e.op, e.output_shape, e.calls) for e in result.recorder.events] + [result.output_shape, result.guessed_values]
    work = count_step(built.model, built.config, opts, "bf16-mixed")
    lives = [(x.nbytes, x.start, x.end, x.step, x.phase, x.module, x.role) for x in sim.lives]
    return rows, [(r.op, r.phase, r.flops, r.bytes) for r in work.ops1 + work.ops2], lives, sim.ops, sim.peak.bytes


def test_trace_count_and_simulation_are_the_same_with_the_shortcut_off(monkeypatch):
    answered = []
    query = tensors.device_query

    def counting(func, args):
        d = query(func, args)
        answered.append(d is not None)
        return d

    for mod in (tensors, counter, tracker):
        monkeypatch.setattr(mod, "device_query", counting)
    on = _run_all()
    assert sum(answered) > 1000  # the queries are answered on top (thousands of them, even for this tiny model)
    for mod in (tensors, counter, tracker):
        monkeypatch.setattr(mod, "device_query", lambda func, args: None)  # every query goes down to FakeTensorMode
    off = _run_all()
    assert on[0] == off[0] and len(on[0]) > 50  # the trace's ops and shapes
    assert on[1] == off[1] and sum(f for _, _, f, _ in on[1]) > 0  # the cost count's ops, FLOPs and bytes
    assert on[2] == off[2] and on[3] == off[3] and on[4] == off[4]  # every storage's life, the ops, the peak


@pytest.mark.parametrize("name", ["counter", "tracker", "tensors"])
def test_each_mode_answers_from_the_one_helper(name):
    mod = {"counter": counter, "tracker": tracker, "tensors": tensors}[name]
    assert mod.device_query is tensors.device_query
