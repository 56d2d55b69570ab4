"""The web's plan options, generated from the one options definition.

Every field of :class:`neurarch.options.InputOptions`,
:class:`neurarch.options.PlanOptions`, :class:`neurarch.options.CostOptions`
and the plain fields of :class:`neurarch.options.Options` becomes one query
parameter of ``/models/{id}`` and one field of the ``POST /api/v1/plan`` body;
a field added to one of those dataclasses appears here with no edit.  A name
that several dataclasses share (``batch``, ``precision``) is one parameter
that sets all of them, as the CLI's flag does; where their defaults differ,
the parameter's default is "unset" and each dataclass keeps its own default
(``batch`` unset: trace batch 1, priced batch "the largest that fits").

Two switches mirror the CLI's ``--plan`` and ``--cost``: ``plan`` (default on:
a model page is the full plan) and ``cost``.

Fields the server decides and a user cannot set: the revision (its own
parameter), ``trust_remote_code`` (never, on a server), ``offline`` and
``timeout_s`` (the server's settings).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import typing
from dataclasses import MISSING
from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, create_model

from ..errors import InputError

# Options fields that are sections (built from the other dataclasses) or that the server controls.
SERVER_FIELDS = ("inputs", "cost", "plan", "revision", "trust_remote_code", "offline", "timeout_s", "cache")
SWITCHES = {
    "plan": (True, "simulate GPU memory per mode, what fits on which card, sharded plans and the cost (the CLI's --plan; default on)"),
    "cost": (False, "price a training run on every card (the CLI's --cost; --plan includes it)"),
}


@dataclasses.dataclass(frozen=True)
class OptionField:
    """One web option: its name, type, default and the dataclass fields it sets."""

    name: str
    kind: str  # int | float | bool | str | list[str] | list[int] | dict
    optional: bool
    default: Any  # JSON-able; None = unset (each target keeps its own default)
    targets: tuple  # ("inputs" | "plan" | "cost" | "options", ...)
    help: str


def _sources():
    from ..options import CostOptions, InputOptions, Options, PlanOptions

    return (("inputs", InputOptions), ("plan", PlanOptions), ("cost", CostOptions), ("options", Options))


def _kind(tp) -> tuple[str, bool]:
    """``(kind, optional)`` of a resolved annotation."""
    optional = False
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        optional = len(args) < len(typing.get_args(tp))
        tp = args[0] if len(args) == 1 else str
        origin = typing.get_origin(tp)
    base = origin or tp
    if base in (tuple, list, set, frozenset):
        inner = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return ("list[int]" if inner and inner[0] is int else "list[str]"), optional
    if base is dict:
        return "dict", optional
    for t in (bool, int, float, str):
        if base is t:
            return t.__name__, optional
    return "str", optional


def _jsonable(value):
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def _default(f: dataclasses.Field):
    if f.default is not MISSING:
        return _jsonable(f.default)
    if f.default_factory is not MISSING:  # type: ignore[misc]
        return _jsonable(f.default_factory())  # type: ignore[misc]
    return None


@functools.lru_cache(maxsize=1)
def _cli_help() -> dict:
    """The CLI's help text per option (so the web says what the CLI says)."""
    try:
        from ..cli.trace import parser as _trace_parser

        return {a.dest: a.help for a in _trace_parser()._actions if a.help}
    except Exception:  # the descriptions are a courtesy; the fields do not depend on them
        return {}


@functools.lru_cache(maxsize=1)
def fields() -> tuple[OptionField, ...]:
    """Every web option, in the order of the dataclasses' fields."""
    from ..options import MODES, OPTIMIZERS, PRECISIONS

    choices = {"precision": PRECISIONS, "optimizer": OPTIMIZERS, "modes": MODES}
    found: dict[str, dict] = {}
    for target, cls in _sources():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if target == "options" and f.name in SERVER_FIELDS:
                continue
            kind, optional = _kind(hints[f.name])
            entry = found.setdefault(f.name, {"kind": kind, "optional": optional, "defaults": [], "targets": []})
            entry["optional"] = entry["optional"] or optional
            entry["defaults"].append(_default(f))
            entry["targets"].append(target)
    help_ = _cli_help()
    out = [OptionField(name, "bool", False, SWITCHES[name][0], (), SWITCHES[name][1]) for name in SWITCHES]
    for name, e in found.items():
        defaults = e["defaults"]
        same = all(d == defaults[0] for d in defaults)
        default = defaults[0] if same else None
        text = help_.get(name) or help_.get({"prices": "price", "cards": "card"}.get(name, name)) or ""
        if name == "verify":
            text = "run the verifier (default on; the CLI's --no-verify turns it off)"
        elif name == "backward":
            text = "trace the backward pass too (default on; the CLI's --no-backward turns it off)"
        if name in choices:
            text = f"{text} (one of: {', '.join(choices[name])})".strip()
        out.append(OptionField(name, e["kind"], e["optional"] or default is None, default, tuple(e["targets"]), text))
    return tuple(out)


_PY = {"int": int, "float": float, "bool": bool, "str": str, "list[str]": list[str], "list[int]": list[int], "dict": dict[str, Union[str, float]]}


@functools.lru_cache(maxsize=1)
def model() -> type[BaseModel]:
    """The strict pydantic model of the options (the API body's ``options``)."""
    spec: dict[str, Any] = {}
    for f in fields():
        tp: Any = _PY[f.kind]
        if f.optional:
            tp = Optional[tp]
        spec[f.name] = (tp, Field(default=f.default, description=f.help or None))
    return create_model(
        "PlanOptions",
        __config__=ConfigDict(extra="forbid", strict=True, title="PlanOptions"),
        __doc__="Plan options: the CLI's flags, one field each. Unset fields take the CLI's defaults.",
        **spec,
    )


def from_query(items: list[tuple[str, str]]) -> dict:
    """Options from query-string pairs.  Lists: repeated and/or comma-separated
    (``modes=full,lora``); dicts: ``prices=A10G=1.20``; booleans: true/false/1/0/yes/no/on/off.
    Unknown names raise (a typo must not silently change nothing)."""
    by_name = {f.name: f for f in fields()}
    out: dict[str, Any] = {}
    for key, raw in items:
        if key in ("revision", "format"):
            continue
        f = by_name.get(key)
        if f is None:
            raise InputError(f"unknown option {key!r}; the options are: {', '.join(by_name)}")
        if raw.strip() == "" and f.kind in ("list[str]", "list[int]", "dict"):
            # an empty form field: unset (optional) or empty
            if f.optional:
                out.setdefault(key, None)
            else:
                out.setdefault(key, {} if f.kind == "dict" else [])
            continue
        if f.kind in ("list[str]", "list[int]"):
            parts: list[Any] = [p.strip() for p in raw.split(",") if p.strip()]
            if f.kind == "list[int]":
                try:
                    parts = [int(p) for p in parts]
                except ValueError:
                    raise _field_error(key, f"{key} must be integers separated by commas, got {raw!r}") from None
            if out.get(key) is None:
                out[key] = []
            out[key].extend(parts)
        elif f.kind == "dict":
            for item in (x for x in raw.split(",") if x.strip()):
                k, sep, v = item.partition("=")
                if not sep or not k.strip():
                    raise _field_error(key, f"{key} must look like NAME=VALUE, got {item!r}")
                out.setdefault(key, {})[k.strip()] = v.strip()
        elif f.kind == "bool":
            low = raw.strip().lower()
            if low not in ("true", "false", "1", "0", "yes", "no", "on", "off", ""):
                raise _field_error(key, f"{key} must be true or false, got {raw!r}")
            out[key] = low in ("true", "1", "yes", "on", "")
        elif raw.strip() == "" and f.optional:
            out[key] = None  # an empty form field: unset
        elif f.kind in ("int", "float"):
            try:
                out[key] = int(raw) if f.kind == "int" else float(raw)
            except ValueError:
                raise _field_error(key, f"{key} must be {'an integer' if f.kind == 'int' else 'a number'}, got {raw!r}") from None
        else:
            out[key] = raw
    return out


def _field_error(field: str, message: str) -> InputError:
    e = InputError(message)
    e.field = field  # type: ignore[attr-defined]
    return e


def normalize(values: dict) -> dict:
    """Validated, complete options: every field present, in canonical form
    (the cache key and the permalink hash are computed from this)."""
    parsed = model().model_validate(values)
    out = parsed.model_dump()
    for f in fields():
        if f.kind in ("list[str]", "list[int]") and out[f.name] is not None and f.name != "input_shape":
            if f.name in ("disable",):
                out[f.name] = sorted(set(out[f.name]))
    to_options(out)  # raises InputError & co. with the CLI's message
    return out


def to_options(values: dict, *, timeout_s: float | None = None):
    """The :class:`neurarch.pipeline.Options` these web options mean (validated as the CLI validates)."""
    from ..cost import PRECISIONS
    from ..verify import parse_disable

    kwargs: dict[str, dict] = {"inputs": {}, "plan": {}, "cost": {}, "options": {}}
    for f in fields():
        v = values.get(f.name, f.default)
        if not f.targets or v is None:
            continue
        for target in f.targets:
            kwargs[target][f.name] = v
    classes = dict(_sources())
    inp = kwargs["inputs"]
    if inp.get("input_shape") is not None:
        inp["input_shape"] = tuple(inp["input_shape"])
    inputs = classes["inputs"](**inp)
    inputs.validate()
    opts_kw = kwargs["options"]
    if "disable" in opts_kw:
        opts_kw["disable"] = parse_disable(opts_kw["disable"])
    precision = opts_kw.get("precision", "bf16-mixed")
    if precision not in PRECISIONS:
        raise _field_error("precision", f"unknown --precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if opts_kw.get("depth") is not None and opts_kw["depth"] <= 0:
        raise _field_error("depth", f"--depth must be positive, got {opts_kw['depth']}")
    want_plan = bool(values.get("plan", SWITCHES["plan"][0]))
    want_cost = want_plan or bool(values.get("cost", SWITCHES["cost"][0]))
    plan = cost = None
    if want_cost:
        cost = classes["cost"](**kwargs["cost"])
        cost.validate()
    if want_plan:
        pk = kwargs["plan"]
        if "modes" in pk:
            pk["modes"] = tuple(pk["modes"])
        plan = classes["plan"](**pk)
        if inspect.signature(plan.validate).parameters:
            plan.validate(precision)
        else:
            plan.validate()
    if not want_cost and any(values.get(k) for k in ("tokens", "samples", "prices")):
        raise InputError("--samples/--tokens/--price only apply with --cost or --plan")
    return classes["options"](inputs=inputs, cost=cost, plan=plan, trust_remote_code=False, timeout_s=timeout_s, **opts_kw)


def from_options(opts) -> dict:
    """The web options of a :class:`neurarch.pipeline.Options` (the inverse of :func:`to_options`);
    a name the dataclasses disagree on (``batch``: trace 1, priced run unset) stays unset."""
    sections = {"inputs": opts.inputs, "plan": opts.plan, "cost": opts.cost, "options": opts}
    values: dict[str, Any] = {"plan": opts.plan is not None, "cost": opts.cost is not None}
    for f in fields():
        if not f.targets:
            continue
        seen = [_jsonable(getattr(sections[t], f.name)) for t in f.targets if sections[t] is not None and hasattr(sections[t], f.name)]
        if not seen:
            continue
        values[f.name] = seen[0] if all(v == seen[0] for v in seen) else None
        if f.name == "disable" and values[f.name] is not None:
            values[f.name] = sorted(values[f.name])
    return normalize(values)


def cli_args(values: dict) -> list[str]:
    """The CLI flags that give the same report (for "Do this to your own model")."""
    out: list[str] = []
    if values.get("plan", True):
        out.append("--plan")
    elif values.get("cost"):
        out.append("--cost")
    for f in fields():
        if not f.targets:
            continue
        v = values.get(f.name, f.default)
        if v == f.default or v is None:
            continue
        flag = "--" + f.name.replace("_", "-")
        if f.kind == "bool":
            if f.name in ("verify", "backward"):
                out.append(f"--no-{f.name}" if not v else "")
            elif v:
                out.append(flag)
        elif f.kind == "dict":
            out += [f"--price {k}={val}" for k, val in v.items()]
        elif f.name == "cards":
            if values.get("card", "A10G") == next(x.default for x in fields() if x.name == "card"):
                out.append(f"--card {values.get('card', 'A10G')}")  # the CLI's first --card is the headline
            out += [f"--card {c}" for c in v]
        elif f.kind.startswith("list"):
            out.append(f"{flag} {','.join(map(str, v))}")
        else:
            out.append(f"{flag} {v}")
    return [x for x in out if x]
