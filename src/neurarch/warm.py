"""The warm plan: a second ``--plan`` of the same model answered without torch.

A plan's sections split in two.  The layer table, the counts, each memory
mode's simulations, the cost's op count and the verifier's findings depend on
the model and on the options that reach the build, the inputs, the trace and
the simulations.  The cards table (each card's largest batch), the multi-GPU
plans and the cost's pricing are arithmetic over those simulations, given the
cards, the headroom, the prices and the run (epochs, samples, tokens, batch).

So a cold plan keeps, in the report cache

    $NEURARCH_CACHE_DIR/reports/   (default ~/.cache/neurarch/reports)

the report and what the arithmetic reads: every simulation each mode ran, by
batch, the cost's per-op counts, and the trained model's parameter count.  A
later plan whose key matches recomputes the cards, multi-GPU and cost sections
from them with the same functions the cold plan uses (:func:`assemble`,
:func:`price`), importing neither torch nor transformers.  When a card or a
headroom needs a batch that was never simulated, the warm plan gives up and the
full plan runs (:func:`lookup` returns None).

The key (:func:`key`) is the SHA-256 of:

* what the user gave: the spec, and the content it names without importing
  anything: a catalog entry's config file and the catalog's tables; a local
  ``config.json`` or folder: every ``*.json`` file of the folder byte for byte
  and every other file's name, size and modification time (the safetensors
  headers the counts come from);
* every option except the cheap ones above and the time limit;
* the code fingerprint of :mod:`neurarch.plan.cache` (every neurarch source
  file and the versions of torch, transformers, peft, bitsandbytes, timm and
  torchvision, read with importlib.metadata), and the verifier rules installed
  from other packages (any makes the plan cold: a rule may read any section).

No warm path for hub ids outside the catalog (their files live on the Hub),
``timm:``/``torchvision:`` names, Python files and ``nn.Module`` sources, and
``--trust-remote-code`` (code that cannot be fingerprinted without running it).
``--no-cache``, ``NEURARCH_NO_CACHE=1``, the size cap (``NEURARCH_CACHE_MAX_MB``,
per folder) and ``NEURARCH_CACHE_DIR`` apply as to the simulation cache; a file
that does not read or decode is removed and the full plan runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from .errors import NeurarchError, first_line
from .jobs import JobOutcome
from .options import DEFAULT_HEADROOM, OPTIMIZER_IMPLEMENTATIONS, CostOptions, Options
from .report import Report

KEY_VERSION = 1
KIND = "reports"
MAX_FOLDER_FILES = 2000  # a folder with more files than this gets no warm path (hashing it would not be cheap)
MAX_JSON_BYTES = 16 << 20  # *.json files above this are keyed by size and modification time

# What a priced run changes without reaching the build, the trace or a simulation.
_CHEAP_COST = ("card", "cards", "prices", "epochs", "samples", "tokens", "batch")
_CHEAP_PLAN = ("headroom",)
_CHEAP = ("timeout_s", "cache")

# What this process read and wrote (tests read it): hits, misses, fallbacks (a batch never simulated), stores.
STATS = {"hits": 0, "misses": 0, "fallbacks": 0, "stores": 0}


class LaterBatchError(Exception):
    """A mode that failed after its input batch was simulated (a card's check batch):
    its error depends on the cards, so such a plan is not kept in the report cache."""


# --------------------------------------------------------------------------
# The sections computed from the simulations (the cold plan and the warm one)
# --------------------------------------------------------------------------


# The order a plan's job results come in (neurarch.pipeline), which is the order the report's errors
# are written in: a replay keeps it.
JOB_ORDER = ("lora", "qlora", "full", "cost", "inference")


def cards_for(c: CostOptions):
    """The cards to price (every built-in card, plus custom ones, prices overridden) and the headline card's name."""
    from .cards import builtin_cards, find, parse_card, with_price

    cards = list(builtin_cards())
    for spec in c.cards:
        card = parse_card(spec)
        cards = [x for x in cards if x.name != card.name] + [card]
    names = {x.name for x in cards}
    head = c.card if c.card in names else find(c.card).name
    for name, price in c.prices.items():
        target = name if name in names else find(name).name
        cards = [with_price(x, price) if x.name == target else x for x in cards]
    return cards, head


def error_line(e: BaseException) -> str:
    """``Type: first line of the message``: how a failed section reports its error."""
    return first_line(f"{type(e).__name__}: {e}") if str(e).strip() else type(e).__name__


def multi_gpu(cards, multi, largest_layer_bytes: int, headroom: float) -> list:
    """Pipeline and FSDP plans for the cards that cannot hold batch 1 of full fine-tuning."""
    from .plan.fit import fsdp_plans, pipeline_plans

    one, c1, c2 = multi
    plans = pipeline_plans(cards, "full", c1.segments if c1 else None, one.breakdown.overhead + (0 if one.phase == "optimizer" else one.breakdown.temporary), one.peak_bytes, headroom)
    return plans + fsdp_plans(cards, "full", c1, c2, largest_layer_bytes, headroom)


def assemble(results: dict, input_batch: int, opts: Options, cards, structure, errors: dict, attention=(None, "", None)):
    """memory.<mode> at the input batch, each card's largest batch per mode, the
    multi-GPU plans, and the cost's per-op work, from the jobs' results
    (``{name: JobOutcome}``).  A section that fails (the cost count, the
    multi-GPU plans) leaves its error in ``errors`` under its JSON path; the
    others stand."""
    from .plan.fit import ModeResult, card_fit
    from .report.memory import MemoryAssumptions, MemorySection

    p = opts.plan
    work = None
    if "cost" in results:
        ok, value = results["cost"]
        if ok:
            work = value
        else:  # the cost section fails on its own; the memory plan stands
            errors["cost"] = first_line(f"counting the step's work failed: {value[0]}: {value[1]}")
    if p is None:
        return None, [], [], work
    section = MemorySection(
        assumptions=MemoryAssumptions(
            precision=opts.precision,
            optimizer=p.optimizer,
            optimizer_implementation=OPTIMIZER_IMPLEMENTATIONS.get(p.optimizer, ""),
            lora_rank=p.lora_rank,
            lora_targets=list(p.lora_targets) if p.lora_targets else None,
            lora_dropout=p.lora_dropout,
            adapter_dtype=p.adapter_dtype or "fp32",
            grad_checkpointing=p.grad_checkpointing,
            grad_accumulation=p.grad_accumulation,
            grad_checkpointing_reentrant=p.grad_checkpointing_reentrant,
            zero_grad_set_to_none=p.zero_grad_set_to_none,
            headroom=p.headroom,
            batch=input_batch,
            context_len=p.context_len,
            attn_implementation=attention[0],
            attn_implementation_how=attention[1],
            task=p.task,
            model_class=attention[2],
            method="training steps simulated on fake tensors (steady state: step 2), CUDA kernel semantics; peak_bytes adds caching-allocator rounding and fixed CUDA overhead",
        )
    )
    fits = [card_fit(c) for c in cards or []]
    multi: list = []
    for mode in p.modes:
        outcome = results[mode]
        if not outcome.ok:  # a mode that does not apply or cannot run is a result, not a crash
            section.errors[mode] = outcome.error[:300]
            continue
        done: ModeResult = outcome.value
        setattr(section, mode, done.memory)
        for fit in fits:
            fit.max_batch[mode], fit.checked[mode] = done.fits[fit.name]
        if done.multi is not None:
            elem = 4 if opts.precision == "fp32" else 2
            largest = max((n.parameters for n in structure.nodes), default=0) * elem
            try:
                multi = multi_gpu(cards, done.multi, largest, p.headroom)
            except Exception as e:  # noqa: BLE001 - a failed section is reported, the rest stands
                errors["multi_gpu"] = error_line(e)
    return section, fits, multi, work


def price(work, opts: Options, seq_len, trainable: int, cards, fits=None, multi=None, memory=None, param_bytes: int = 0):
    """The cost section: per card, the run the memory plan says fits (see cost.price.runs_for)."""
    from .cost.price import estimate

    c = opts.cost
    assert c is not None  # priced: the caller checked
    by_card = {f.name: dict(f.max_batch) for f in fits} if fits else None
    fsdp = {m.card: (m.gpus, m.max_batch_per_gpu) for m in multi or [] if m.strategy == "fsdp"}
    by_mode = {}
    for mode in ("lora", "qlora"):
        mm = getattr(memory, mode, None) if memory is not None else None
        if mm is not None:
            by_mode[mode] = mm.trainable_parameters
    return estimate(
        work,
        cards,
        precision=c.precision,
        epochs=c.epochs,
        samples=c.samples_per_epoch,
        tokens=c.tokens,
        seq_len=seq_len,
        batch=c.batch,
        trainable=trainable,
        headline_card=c.card,
        fits=(lambda card: by_card.get(card.name)) if by_card is not None else None,
        fsdp=lambda card: fsdp.get(card.name),
        trainable_by_mode=by_mode,
        param_bytes=param_bytes,
        grad_accumulation=opts.plan.grad_accumulation if opts.plan is not None else 1,
    )


def priced_sections(results: dict, input_batch: int, seq_len, opts: Options, cards, structure, trainable: int, attention=(None, "", None)) -> dict:
    """memory, cards, multi_gpu, cost and their errors: the part of a report that
    :func:`assemble` and :func:`price` compute (one function for both plans)."""
    errors: dict[str, str] = {}
    memory, fits, multi, work = assemble(results, input_batch, opts, cards, structure, errors, attention)
    cost = None
    if opts.cost is not None and work is not None:
        try:
            elem = 4 if opts.cost.precision == "fp32" else 2  # FSDP gathers weights in the compute dtype
            cost = price(work, opts, seq_len, trainable, cards, fits, multi, memory, trainable * elem)
        except Exception as e:  # noqa: BLE001 - a failed section is reported, the rest stands
            errors["cost"] = error_line(e)
    return {"memory": memory, "cards": fits, "multi_gpu": multi, "cost": cost, "errors": errors}


# --------------------------------------------------------------------------
# The key
# --------------------------------------------------------------------------


def _file_entry(path: Path) -> list | None:
    try:
        st = path.stat()
        if path.suffix == ".json" and st.st_size <= MAX_JSON_BYTES:
            return [path.name, hashlib.sha256(path.read_bytes()).hexdigest()]
        return [path.name, st.st_size, st.st_mtime_ns]
    except OSError:
        return None


def _folder_identity(folder: Path, given: Path | None) -> list | None:
    """Every file under ``folder`` (names relative to it), and the given file's bytes."""
    out: list = []
    try:
        files = sorted(p for p in folder.rglob("*") if p.is_file())
    except OSError:
        return None
    if len(files) > MAX_FOLDER_FILES:
        return None
    for f in files:
        entry = _file_entry(f)
        if entry is None:
            return None
        out.append([str(f.relative_to(folder)), *entry[1:]])
    if given is not None:
        try:
            out.append(["given", hashlib.sha256(given.read_bytes()).hexdigest()])
        except OSError:
            return None
    return out


def source_identity(spec: str, opts: Options) -> list | None:
    """What the spec names, read without torch or transformers; None: no warm path."""
    spec = spec.strip()
    if not spec or opts.trust_remote_code or spec.startswith(("timm:", "torchvision:", "python:")):
        return None
    path = Path(spec).expanduser()
    try:
        exists = path.exists()
    except OSError:
        return None
    if exists:
        real = path.resolve()
        if real.is_dir():
            ident = _folder_identity(real, real / "config.json")
        else:
            ident = _folder_identity(real.parent, real)
        return None if ident is None else ["local", str(real), ident]
    if opts.revision is not None:
        return None
    from .sources import _looks_like_path

    if _looks_like_path(spec):
        return None
    from importlib import resources

    from .sources import catalog

    entry = catalog.lookup(spec)
    if entry is None:
        return None  # a hub id: its files are on the Hub
    root = resources.files("neurarch.catalog")
    parts = [entry.id, entry.filename]
    for f in (root.joinpath("configs").joinpath(entry.filename), root.joinpath("provenance.tsv"), root.joinpath("checkpoint_counts.tsv")):
        parts.append(hashlib.sha256(f.read_bytes()).hexdigest())
    return ["catalog", parts]


def _plain(x: Any) -> Any:
    """JSON of an option value, the same in every process (sets sorted)."""
    if isinstance(x, (set, frozenset)):
        return sorted(_plain(v) for v in x)
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))}
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    return repr(x)


def options_key(opts: Options) -> dict:
    """Every option that reaches the build, the inputs, the trace, a simulation or the verifier."""
    d = dataclasses.asdict(dataclasses.replace(opts, cost=opts.priced))
    for name in _CHEAP:
        d.pop(name, None)
    for name in _CHEAP_COST:
        if d.get("cost") is not None:
            d["cost"].pop(name, None)
    for name in _CHEAP_PLAN:
        if d.get("plan") is not None:
            d["plan"].pop(name, None)
    return _plain(d)


def _third_party_rules() -> bool:
    from importlib import metadata

    from .verify.registry import ENTRY_POINT_GROUP

    try:
        return bool(list(metadata.entry_points(group=ENTRY_POINT_GROUP)))
    except Exception:  # noqa: BLE001 - unreadable metadata: no warm path
        return True


def key(spec: str, opts: Options) -> str | None:
    """The report cache's key for this spec and these options, or None (no warm path: see the module docstring)."""
    from .plan import cache as _cache

    if not opts.cache or not _cache.enabled() or opts.priced is None:
        return None
    ident = source_identity(spec, opts)
    if ident is None or (opts.verify and _third_party_rules()):
        return None
    text = json.dumps([KEY_VERSION, spec.strip(), ident, options_key(opts), _cache.code_fingerprint()], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


# --------------------------------------------------------------------------
# Store and replay
# --------------------------------------------------------------------------


class _NotSimulated(Exception):
    """A batch the cold plan never simulated: the warm plan gives up."""


def entry(report: Report, results: dict, input_batch: int, seq_len, trainable: int, attention) -> dict | None:
    """What the report cache keeps of a cold plan, or None when it cannot be replayed
    (a mode that failed at a card's check batch, a worker that died)."""
    from .cost.price import encode_work

    modes: dict = {}
    work = None
    for name, outcome in results.items():
        if name == "cost":
            work = {"ok": True, "work": encode_work(outcome.value)} if outcome.ok else {"ok": False, "error": list(outcome.value)}
            continue
        if not outcome.ok:
            if outcome.value[0] in ("LaterBatchError", "WorkerCrash", "TraceTimeout", "TimeLimit"):
                return None
            modes[name] = {"ok": False, "error": list(outcome.value)}
            continue
        modes[name] = {"ok": True, "sims": [[b, raw] for b, raw in sorted(outcome.value.sims.items())]}
    verifier_error = report.errors.get("verifier")
    base = report.model_copy(update={"memory": None, "cards": [], "multi_gpu": [], "cost": None, "errors": {}})
    return {
        "report": json.loads(base.model_dump_json()),
        "modes": modes,
        "work": work,
        "input_batch": input_batch,
        "seq_len": seq_len,
        "trainable": trainable,
        "attention": list(attention),
        "verifier_error": verifier_error,
    }


def store(k: str | None, value: dict | None) -> None:
    from .plan import cache as _cache

    if k is None or value is None:
        return
    try:
        _cache.store(k, value, KIND)
        STATS["stores"] += 1
    except Exception:  # noqa: BLE001 - a report that does not store is just not cached
        pass


def _replay(raw: dict, opts: Options, cards) -> Report:
    from .cost.price import decode_work
    from .plan.curve import decode_result
    from .plan.fit import mode_result

    report = Report.model_validate(raw["report"])
    headroom = opts.plan.headroom if opts.plan is not None else DEFAULT_HEADROOM  # no plan: no modes to fit
    results: dict = {}
    for name, m in raw["modes"].items():
        if not m["ok"]:
            results[name] = JobOutcome(False, tuple(m["error"]))
            continue
        sims = {int(b): decode_result(r) for b, r in m["sims"]}

        def at(b: int, sims=sims):
            if b not in sims:
                raise _NotSimulated(b)
            return sims[b]

        results[name] = JobOutcome(True, mode_result(at, raw["input_batch"], cards, name, headroom))
    w = raw["work"]
    if w is not None:
        results["cost"] = JobOutcome(True, decode_work(w["work"])) if w["ok"] else JobOutcome(False, tuple(w["error"]))
    order = [n for n in JOB_ORDER if n in results]
    results = {n: results[n] for n in order}
    sections = priced_sections(results, raw["input_batch"], raw["seq_len"], opts, cards, report.structure, raw["trainable"], tuple(raw["attention"]))
    errors = sections.pop("errors")
    if raw["verifier_error"] is not None:
        errors["verifier"] = raw["verifier_error"]
    for name, value in sections.items():
        setattr(report, name, value)
    report.errors = errors
    return report


def lookup(spec: str, opts: Options) -> Report | None:
    """The report of a plan whose build, trace and simulations were kept, with the
    cards, multi-GPU and cost sections recomputed for these options; None: run the
    full plan.  Imports neither torch nor transformers."""
    from .plan import cache as _cache

    try:
        k = key(spec, opts)
    except NeurarchError:
        raise
    except Exception:  # noqa: BLE001 - a spec the key cannot read: the full plan says what is wrong
        return None
    if k is None:
        return None
    run = opts.priced
    assert run is not None  # the key says so
    cards, head = cards_for(run)  # a bad card or price is refused here, as by the full plan
    raw = _cache.load(k, KIND)
    if raw is None:
        STATS["misses"] += 1
        return None
    priced = dataclasses.replace(opts, cost=dataclasses.replace(run, card=head))
    try:
        report = _replay(raw, priced, cards)
    except _NotSimulated:
        STATS["fallbacks"] += 1
        return None
    except Exception:  # noqa: BLE001 - an entry of another shape: removed, the full plan runs
        with _cache._quiet():
            (_cache.directory(KIND) / k[:2] / f"{k}.json").unlink()
        STATS["misses"] += 1
        return None
    STATS["hits"] += 1
    return report
