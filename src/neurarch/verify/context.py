"""What a rule sees: :class:`CheckContext`.

Everything a rule may look at is here, read-only by convention:

* ``report`` — the traced report (layer table, counts, input shapes);
* ``model`` — the rebuilt ``nn.Module``.  After the trace its parameters are
  fake tensors: shapes, dtypes and ``requires_grad`` are real, values are not;
* ``config`` — the transformers config, or ``None`` for plain modules;
* the user's intent: ``training`` (fine-tune or from scratch, vs. only run it),
  ``from_scratch`` (random init, ``--from-scratch``), ``precision``;
* ``source_config`` — the config file as published (a dict), before the
  library read it (transformers may rewrite a field: T5 ties its head always);
* the memory plan, when one was made: ``report.memory`` (:attr:`memory`), filled
  before the rules run.  It holds each mode's peak and breakdown, not bytes per
  layer-table row, so the activation rules use a proxy from the traced output
  shapes and say so in their message.

Helpers shared by several rules (module lookup, output kind, activation
profile) are cached properties, computed once per run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from torch import nn
else:  # imported on first use: listing the rules must not import torch
    from .._lazy import nn

from ..report import Node, Report


class NotApplicable(Exception):
    """Raised by a rule's check when it finds it has nothing to say about this model.

    The engine records ``"<rule>: <reason>"`` in ``verifier.skipped``; use it
    for conditions only the check itself can establish (``applies`` covers
    the cheap ones).
    """


@dataclass
class CheckContext:
    report: Report
    model: nn.Module
    config: Any = None
    from_scratch: bool = False
    training: bool = True
    # Training precision, as the memory planner spells it: "fp32", "bf16-mixed",
    # "fp16-mixed", "bf16".  None = the user did not say.
    precision: Optional[str] = None
    # The model folder's tokenizer (sources.tokenizer.TokenizerInfo), when its files were read.
    tokenizer: Any = None
    # The config file as published (the source's dict, before the library read it), or None.
    source_config: Optional[dict] = None
    _modules: dict[str, nn.Module] = field(default_factory=dict, init=False, repr=False)

    # -- lookups ---------------------------------------------------------------

    @property
    def nodes(self) -> list[Node]:
        return self.report.structure.nodes

    def module(self, name: str) -> Optional[nn.Module]:
        """The module a layer-table row names, or None (functional-op rows, unknown names)."""
        if not self._modules:
            self._modules = dict(self.model.named_modules())
        return self._modules.get(name)

    def name_of(self, module: nn.Module) -> Optional[str]:
        """The name the layer table uses for ``module`` (its first registered name), or None."""
        if not self._modules:
            self._modules = dict(self.model.named_modules())
        return next((n for n, m in self._modules.items() if m is module), None)

    @property
    def forward_ok(self) -> bool:
        return bool(self.report.forward_pass and self.report.forward_pass.ok)

    @property
    def backward_ok(self) -> bool:
        return bool(self.report.backward_pass and self.report.backward_pass.ok)

    @property
    def batch(self) -> int:
        return self.report.input.batch if self.report.input else 1

    @property
    def memory(self):
        """The report's memory section (``--plan``), or None."""
        return self.report.memory

    @property
    def model_class(self) -> str:
        return self.report.model.model_class or type(self.model).__name__

    # -- shared analyses (see graph.py) ------------------------------------------

    @cached_property
    def output(self):
        """What the model outputs: :class:`~neurarch.verify.graph.OutputInfo`."""
        from .graph import detect_output

        return detect_output(self)

    @cached_property
    def activations(self):
        """Per-row activation sizes: :class:`~neurarch.verify.graph.ActivationProfile`."""
        from .graph import activation_profile

        return activation_profile(self)
