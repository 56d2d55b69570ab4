"""The batch search's warm-up makes torch Adam/AdamW state without running the update.

The reference is torch itself: a real ``optimizer.step()`` on zero gradients.  Both must
leave the same state tensors (names, shapes, dtypes, devices) and, under the live-storage
tracker, the same storages alive afterwards; the warm-up must run fewer ops.
"""

from __future__ import annotations

import pytest
import torch

from neurarch.plan.tracker import WEIGHTS, LiveTracker
from neurarch.plan.train.optimizer import LR, _make_state, warm_up


def _params():
    torch.manual_seed(0)
    return [torch.nn.Parameter(torch.randn(16, 8)), torch.nn.Parameter(torch.randn(8)), torch.nn.Parameter(torch.randn(3, 4, 5))]


def _state(opt):
    return [sorted((k, tuple(v.shape), v.dtype, v.device.type) for k, v in opt.state[p].items()) for p in opt.param_groups[0]["params"]]


class _Count(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: torch.optim.AdamW(ps, lr=LR, foreach=True),
        lambda ps: torch.optim.AdamW(ps, lr=LR, foreach=False),
        lambda ps: torch.optim.AdamW(ps, lr=LR, fused=True),
        lambda ps: torch.optim.Adam(ps, lr=LR, amsgrad=True, foreach=True),
    ],
    ids=["adamw-foreach", "adamw-single", "adamw-fused", "adam-amsgrad"],
)
@pytest.mark.parametrize("set_to_none", [True, False])
def test_state_equals_a_real_step_on_zero_gradients(make, set_to_none):
    runs = {}
    for how in ("real", "warm-up"):
        ps = _params()
        opt = make(ps)
        counter, tracker = _Count(), LiveTracker()
        with tracker, counter:
            for p in ps:
                tracker.register(p, WEIGHTS)  # as a simulation registers the model's weights first
            if how == "real":
                for p in ps:
                    p.grad = torch.zeros_like(p)
                opt.step()
                opt.zero_grad(set_to_none=set_to_none)
            else:
                made = warm_up(opt, ps, set_to_none)
            alive = sorted(x.nbytes for x in tracker.lives if x.end is None and x.role != WEIGHTS)
        runs[how] = (_state(opt), alive, counter.ops, [p.grad is None for p in ps])
        if how == "warm-up":
            assert len(made) == sum(len(opt.state[p]) for p in ps)
    real, warm = runs["real"], runs["warm-up"]
    assert warm[0] == real[0]  # the same state tensors
    assert warm[1] == real[1]  # the same storages alive after it (state, and the zeroed gradients if kept)
    assert warm[3] == real[3] == [set_to_none] * 3
    assert warm[2] < real[2]  # and without the update's ops


def test_other_optimizers_take_the_real_step():
    ps = _params()
    for opt in (torch.optim.SGD(ps, lr=LR, momentum=0.9), torch.optim.Adafactor(ps, lr=LR)):
        assert _make_state(opt) is False
