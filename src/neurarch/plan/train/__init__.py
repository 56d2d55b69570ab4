"""One training step, written once, run two ways.

The simulator (:mod:`neurarch.plan.simulation`) runs these functions on fake
tensors; the measurement (:mod:`neurarch.plan.real_step`) runs the very same
functions on real tensors.  Sharing the code is what makes the comparison
fair: the same modules, the same loss, the same optimizer calls, the same
Python references dropped at the same lines.

The step is what ``transformers.Trainer`` does: forward with labels, keep only
the loss (the output object with its logits is dropped before backward),
``loss.backward()``, ``optimizer.step()``, ``optimizer.zero_grad(set_to_none=True)``
(or ``set_to_none=False``, torch 1.x's default, with ``TrainSetup.zero_grad_set_to_none``).

By job:

* :mod:`.setup` — :class:`TrainSetup` (the options of one mode) and :class:`PlanOptionError`;
* :mod:`.model` — dtype casts, no random structure, gradient checkpointing;
* :mod:`.adapters` — LoRA, QLoRA and the NF4 quantization of the base weights;
* :mod:`.prepare` — the model made ready for one mode;
* :mod:`.optimizer` — the optimizer and the state step 1 leaves (:func:`warm_up`);
* :mod:`.batch` — the inputs and the task's labels;
* :mod:`.loop` — :func:`train`, the :class:`Observer` it reports to, autocast;
  the loss is :func:`neurarch.trace.loss.loss_of`, the one the trace and the cost use.
"""

from .adapters import QLORA_BLOCKSIZE, biases_cast_on_first_forward, lora_targets, qlora_quantized, quantize_4bit
from .batch import label_specs, make_batch
from .loop import Observer, autocast_for, step_loss, train
from .model import CHECKPOINT_KWARGS, REENTRANT_KWARGS, cast_model, checkpoint_kwargs, enable_checkpointing, no_random_structure
from .optimizer import LR, SGD_MOMENTUM, make_optimizer, trainable, warm_up
from .prepare import prepare
from .setup import DEVICES, PlanOptionError, TrainSetup

__all__ = [
    "CHECKPOINT_KWARGS",
    "DEVICES",
    "LR",
    "QLORA_BLOCKSIZE",
    "REENTRANT_KWARGS",
    "SGD_MOMENTUM",
    "Observer",
    "PlanOptionError",
    "TrainSetup",
    "autocast_for",
    "biases_cast_on_first_forward",
    "cast_model",
    "checkpoint_kwargs",
    "enable_checkpointing",
    "label_specs",
    "lora_targets",
    "qlora_quantized",
    "make_batch",
    "make_optimizer",
    "no_random_structure",
    "prepare",
    "quantize_4bit",
    "step_loss",
    "train",
    "trainable",
    "warm_up",
]
