"""The optimizer's per-parameter ops answered directly (neurarch.fake.direct) are FakeTensorMode's answers.

Each answer is compared with the one FakeTensorMode's own handler gives for the same call
(the reference: no neurarch code in between), and a simulation with the direct answers
with the same simulation without them, storage by storage.
"""

import contextlib

import pytest
import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

import neurarch.fake.direct as direct
import neurarch.plan.simulation as simulation
from neurarch.build import build_from_config
from neurarch.fake.hits import MISS
from neurarch.inputs import InputOptions, plan_inputs
from neurarch.plan.train import TrainSetup
from tiny_configs import LLAMA

aten = torch.ops.aten


class _Direct(TorchDispatchMode):
    """A mode right above FakeTensorMode that asks neurarch.fake.direct first (as the tracker does)."""

    def __init__(self, fake):
        super().__init__()
        self.fake = fake
        self.answered = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = direct.answer(self.fake, func, args, kwargs or {})
        if out is not MISS:
            self.answered += 1
            return out
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _modes(use_direct: bool):
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    above = _Direct(mode)
    with mode, above if use_direct else contextlib.nullcontext():
        yield mode, above


def _meta(t: torch.Tensor) -> tuple:
    return (type(t), tuple(t.shape), t.stride(), t.dtype, t.device, t.storage_offset(), t.requires_grad, t.untyped_storage().nbytes(), t.is_contiguous())


def test_item_of_a_known_value_is_fake_tensor_modes():
    for use in (True, False):
        with _modes(use) as (mode, above):
            values = [torch.tensor(2.5), torch.tensor(7), torch.tensor(True), torch.tensor(0.0, dtype=torch.float64)]
            steps = [torch.tensor(0.0) for _ in range(3)]
            torch._foreach_add_(steps, 1)  # Adam's step counters, counted in place
            got = [v.item() for v in values] + [s.item() for s in steps]
            if use:
                assert above.answered >= len(got) + len(values) + len(steps)  # every item() and every lift
                direct_got = got
            else:
                torch_got = got
    assert direct_got == torch_got == [2.5, 7, True, 0.0, 1.0, 1.0, 1.0]
    assert [type(x) for x in direct_got] == [type(x) for x in torch_got]


def test_item_without_a_value_is_left_to_fake_tensor_mode():
    with _modes(True) as (mode, above):
        x = torch.empty(3)
        with pytest.raises(DataDependentOutputException):  # FakeTensorMode's own error: a fake tensor has no value
            x.sum().item()
        assert above.answered == 0


def test_a_lifted_tensor_is_fake_tensor_modes():
    made = {}
    for use in (True, False):
        with _modes(use) as (mode, _):
            ts = [torch.tensor(0.0), torch.tensor([1.0, 2.0]), torch.tensor(3, dtype=torch.int64), torch.tensor(0.5, dtype=torch.bfloat16), torch.zeros(2000)]
            made[use] = [(_meta(t), t.constant is not None, None if t.constant is None else t.constant.tolist()) for t in ts]
            assert all(isinstance(t, FakeTensor) and t.fake_mode is mode for t in ts)
            a = ts[0]
            a.add_(1)  # a write to a constant propagates to it, as torch's
            assert a.item() == 1.0
    assert made[True] == made[False]


def test_foreach_sqrt_gives_fake_tensor_modes_outputs():
    def tensors():
        base = torch.empty(6, 10, dtype=torch.float32)
        return [
            torch.empty(4, 8),
            torch.empty(4, 8, dtype=torch.bfloat16),
            torch.empty(8, 4).t(),  # transposed
            base[1:5, 2:7],  # a strided slice, offset
            torch.empty(2, 3, 5, 5).to(memory_format=torch.channels_last),
            torch.empty(()),
            torch.empty(0, 3),
            torch.empty(3, 1).expand(3, 4),
            torch.empty(5, dtype=torch.float16, device="cuda"),
        ]

    out = {}
    for use in (True, False):
        with _modes(use) as (mode, above):
            ins = tensors()
            res = torch._foreach_sqrt(ins)
            assert len({id(r.untyped_storage()) for r in res}) == len(res)  # each its own storage
            assert not any(r.untyped_storage() is i.untyped_storage() for r, i in zip(res, ins))
            out[use] = [_meta(r) for r in res]
            if use:
                assert above.answered == 1
    assert out[True] == out[False]


def test_foreach_sqrt_of_known_values_is_left_to_fake_tensor_mode():
    with _modes(True) as (mode, above):
        res = torch._foreach_sqrt([torch.tensor(4.0), torch.tensor(9.0)])  # constants: torch propagates their values
        assert above.answered == 2  # the two lifts, not the foreach op
        assert [r.item() for r in res] == [2.0, 3.0]


def test_nothing_is_answered_with_another_mode_between():
    mode = FakeTensorMode(allow_non_fake_inputs=True)

    class Between(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    above = _Direct(mode)
    with mode, Between(), above:
        x = torch.tensor(1.5)
        assert x.item() == 1.5
        torch._foreach_sqrt([torch.empty(3)])
    assert above.answered == 0


def _simulate(monkeypatch, on: bool, setup: TrainSetup):
    monkeypatch.setattr(direct, "ANSWER", on)
    built = build_from_config(dict(LLAMA), "test")
    plan = plan_inputs(built.model, built.config, InputOptions(batch=2, seq_len=32))
    return simulation.simulate(built, plan, setup, record_ops=True)


@pytest.mark.parametrize(
    "setup",
    [
        TrainSetup(mode="full", precision="bf16-mixed"),
        TrainSetup(mode="full", precision="fp32", optimizer="adamw"),
        TrainSetup(mode="lora", precision="bf16-mixed"),
    ],
    ids=["full-bf16", "full-fp32-adamw", "lora"],
)
def test_a_simulation_is_the_same_with_the_direct_answers(monkeypatch, setup):
    calls = []
    real = direct.answer

    def counting(*a):
        out = real(*a)
        if out is not MISS:
            calls.append(a[1])
        return out

    monkeypatch.setattr(direct, "answer", counting)
    fast = _simulate(monkeypatch, True, setup)
    assert {aten._local_scalar_dense.default, aten.lift_fresh.default, aten._foreach_sqrt.default} <= set(calls)
    slow = _simulate(monkeypatch, False, setup)
    # Storages made in the same order, with the same sizes, steps, phases, modules and roles, and
    # freed at the same events.  Which of two storages of a size freed together (a LoRA layer's
    # kept inputs) gets which event varies between two runs of the same code in one process.
    assert [(x.nbytes, x.start, x.step, x.phase, x.module, x.role) for x in fast.lives] == [(x.nbytes, x.start, x.step, x.phase, x.module, x.role) for x in slow.lives]
    assert sorted((x.nbytes, x.end or -1) for x in fast.lives) == sorted((x.nbytes, x.end or -1) for x in slow.lives)
    assert fast.ops == slow.ops
    assert fast.peak == slow.peak and fast.rounded_bytes == slow.rounded_bytes and fast.step_peaks == slow.step_peaks
