"""Stages 1 to 3 in one call: resolve a spec, build it, plan its inputs, and build the recipe's model.

:func:`prepare` is what every run that simulates or measures a training step
starts with (``analyze``, ``neurarch-trace measure``): the published model
(traced, compared with its checkpoint), the inputs planned on it, and the
model the step trains (``--task``'s head, ``--attn-implementation``'s
attention; the published model itself when neither is given).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..build import Attention, BuiltModel, attention_of, build, recipe_model
from ..options import Options
from ..sources import ModelSource, resolve
from .planner import plan_inputs
from .types import InputPlan
from .work import check_plan


@dataclass
class Prepared:
    """What the stages before the trace give the ones after it."""

    source: ModelSource
    built: BuiltModel  # the published architecture, transformers' default attention
    plan: InputPlan  # the inputs, planned on ``built``
    trained: BuiltModel  # the model a training step runs: ``built``, or the recipe's rebuild
    attention: Attention  # the attention ``trained`` runs, and why


def resolve_spec(spec: str, options: Options) -> ModelSource:
    """Stage 1 under ``options`` (revision, remote code, offline)."""
    return resolve(spec, revision=options.revision, trust_remote_code=options.trust_remote_code, offline=options.offline)


def prepare(spec: str | ModelSource, options: Options, *, recipe: bool = True) -> Prepared:
    """Resolve ``spec`` (or take an already resolved source), build it and plan its inputs.

    ``recipe``: also build the model ``options.plan``'s recipe trains (see
    :func:`neurarch.build.recipe_model`); with ``recipe=False`` the trained
    model is the published one and no attention is named.  A recipe that swaps
    in eager attention keeps the attention scores, so the plan is bounded for
    it before anything runs (a :class:`~neurarch.errors.LimitError`).
    """
    source = spec if isinstance(spec, ModelSource) else resolve_spec(spec, options)
    built = build(source)
    plan = plan_inputs(built.model, built.config, options.inputs, source.default_input_shape)
    trained, attention = recipe_model(built, source, options.plan) if recipe else (built, Attention())
    if attention.used == "eager" and attention_of(built.model) != "eager":
        check_plan(plan, trained.config, options.inputs, attention="eager")
    return Prepared(source=source, built=built, plan=plan, trained=trained, attention=attention)


__all__ = ["Prepared", "prepare", "resolve_spec"]
