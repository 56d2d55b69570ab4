"""The one loss (neurarch.trace.loss.loss_of) that the trace, the plan's step and the cost run
backward from, on outputs whose sums are known by hand."""

import pytest
import torch
from transformers.modeling_outputs import CausalLMOutput

from neurarch.plan.train import PlanOptionError, step_loss
from neurarch.trace.loss import loss_of


def _t(values, grad=True):
    return torch.tensor(values, dtype=torch.float32, requires_grad=grad)


def test_the_task_loss_when_the_model_computed_one():
    loss = _t(2.5)
    out = CausalLMOutput(loss=loss, logits=_t([[1.0, 2.0]]))
    assert loss_of(out) is loss
    assert step_loss(out) is loss
    # The trace sums every floating output instead: 2.5 + 1 + 2 = 5.5.
    assert loss_of(out, every_output=True).item() == 5.5


def test_without_a_task_loss_the_first_floating_output_summed_in_fp32():
    first = _t([[1.0, 2.0], [3.0, 4.0]]).to(torch.bfloat16)
    out = (torch.tensor([7, 8]), first, _t([100.0]))  # integer ids first: skipped
    loss = loss_of(out)
    assert loss.dtype == torch.float32 and loss.item() == 10.0  # 1 + 2 + 3 + 4
    assert loss_of(out, every_output=True).item() == 110.0  # and the second output's 100


def test_nothing_to_train_on():
    frozen = (_t([1.0], grad=False), _t([2.0]))
    assert loss_of(frozen) is None  # the first floating output needs no grad
    assert loss_of(frozen, every_output=True).item() == 2.0  # the one that does
    with pytest.raises(PlanOptionError, match="no floating tensor to train on"):
        step_loss(frozen)
    assert loss_of((torch.tensor([1]),), every_output=True) is None


def test_the_trace_the_step_and_the_cost_call_the_same_function():
    import neurarch.cost.estimate as cost
    import neurarch.plan.train.loop as loop
    import neurarch.trace.run as run

    assert run.loss_of is cost.loss_of is loop.loss_of is loss_of
    assert loop.train.__kwdefaults__["loss_fn"] is step_loss
