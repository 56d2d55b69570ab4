"""Config fuzzing: thousands of broken config.json files, and not one crash or hang.

Every case starts from a bundled catalog config (cut to 2 layers so a valid
one traces in about a second), applies one to three mutations, writes the
result as a ``config.json`` and runs it through the CLI's own entry
(``neurarch.cli.main([path, ...])``, in a worker process).  Mutations:

* ``delete``      a field removed (top level or inside a sub-config)
* ``wrong_type``  a value replaced by a string, list, dict, null, NaN,
                  Infinity, a huge or negative int, a float, a boolean
* ``size``        a structural size (layers, heads, widths, vocab...) set to
                  0, negative, huge, fractional or mistyped
* ``names``       unknown or mismatched ``model_type`` / ``architectures``
* ``subconfig``   nested sub-configs (text_config, rope_scaling, ...) broken or added
* ``unicode``     unicode, control characters, lone surrogates, very long strings
* ``add``         unknown fields, some with size-like names
* ``duplicate``   a key written twice (text level)
* ``deep``        deeply nested lists or objects (text level)
* ``non_object``  JSON that is not an object, or not JSON at all
* ``corrupt``     truncated text, flipped bytes, invalid UTF-8, a BOM, comments

Each outcome is one of

* ``report``  exit 0 and a JSON report on stdout;
* ``error``   exit 2 and exactly one line on stderr (a NeurarchError);
* ``timeout`` neurarch's own time limit fired (a clean one-line error too);
* ``crash``   anything else: the CLI's "internal error" (exit 1), more than
              one line, a traceback, an exception escaping ``main``;
* ``hang``    no answer within the wall-clock limit: the worker is killed
              (its whole process group) and replaced;
* ``memory``  the worker's RSS passed the memory limit: killed and replaced.

Case ``i`` is a pure function of ``(seed, i)``, so a run is resumable: results
are appended to a JSONL file and a rerun skips the cases already there.

Usage::

    nice -n 10 python benchmarks/fuzz.py --cases 10000            # resumable long run
    python benchmarks/fuzz.py --summary                           # counts from the results file
    python benchmarks/fuzz.py --show 1234                         # print case 1234's config.json
    python benchmarks/fuzz.py --cases 50 --results /tmp/f.jsonl -v
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import platform
import random
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RESULTS = ROOT / "benchmarks" / "fuzz_results.jsonl"
SEED = 20261201
CASE_TIMEOUT_S = 60.0  # wall clock per case, enforced by the parent (a hang past it is a failure)
NEURARCH_TIMEOUT_S = 40  # neurarch's own --timeout inside the case
MEMORY_LIMIT_BYTES = 6 << 30  # the worker's RSS, watched by the parent
CLI_ARGS = ["--no-verify", "--seq-len", "16", "--timeout", str(NEURARCH_TIMEOUT_S)]
FORMATS = ["json", "text", "markdown", "html"]  # case i renders as FORMATS[i % 4]

LAYER_FIELDS = {
    "num_hidden_layers",
    "n_layer",
    "num_layers",
    "n_layers",
    "encoder_layers",
    "decoder_layers",
    "num_encoder_layers",
    "num_decoder_layers",
}
SIZE_FIELDS = [
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "hidden_size",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "head_dim",
    "n_embd",
    "n_head",
    "n_layer",
    "n_positions",
    "d_model",
    "d_ff",
    "d_kv",
    "num_heads",
    "num_layers",
    "encoder_layers",
    "decoder_layers",
    "image_size",
    "patch_size",
    "num_channels",
    "hidden_sizes",
    "depths",
    "embed_dim",
    "num_local_experts",
    "num_experts",
    "num_experts_per_tok",
    "sliding_window",
    "num_labels",
    "type_vocab_size",
    "rotary_dim",
    "partial_rotary_factor",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "window_size",
    "embedding_size",
    "max_window_layers",
]
SUB_CONFIGS = ["text_config", "vision_config", "audio_config", "rope_scaling", "quantization_config", "encoder", "decoder", "backbone_config"]
EXOTIC_TYPES = ["", "not-a-model", "LLAMA", "llama ", "llam\u0430", "gpt2\u0000", "x" * 300, "\ud83e\udd99", "auto", "__init__"]
EXOTIC_ARCHS = [
    "Nope",
    "",
    "AutoModel",
    "PreTrainedModel",
    "LlamaPreTrainedModel",
    "GenerationMixin",
    "os.system",
    "__import__('os')",
    "LlamaForCausalLM",
    "BertModel",
    "GPT2LMHeadModel",
    "T5ForConditionalGeneration",
    "ResNetForImageClassification",
    "ViTModel",
    "CLIPModel",
    "Conv1D",
    "PretrainedConfig",
    "x" * 1000,
]


# --------------------------------------------------------------------------
# Building cases
# --------------------------------------------------------------------------


def _cut(x):
    """The config with every layer count at most 2 (sub-configs too)."""
    if isinstance(x, dict):
        out = {}
        for k, v in x.items():
            if k in LAYER_FIELDS and isinstance(v, int) and not isinstance(v, bool):
                out[k] = min(v, 2)
            elif k == "depths" and isinstance(v, list):
                out[k] = [min(d, 2) if isinstance(d, int) else d for d in v]
            else:
                out[k] = _cut(v)
        return out
    return x


def base_configs() -> dict[str, dict]:
    from neurarch.sources.catalog import entries

    return {k: _cut(e.config()) for k, e in sorted(entries().items())}


def _paths(cfg: dict, rng: random.Random) -> list[tuple]:
    """Key paths to mutate: top-level keys mostly, sub-config keys sometimes (labels rarely)."""
    top = [(k,) for k in cfg]
    nested = [(k, k2) for k, v in cfg.items() if isinstance(v, dict) and k not in ("id2label", "label2id") for k2 in v]
    labels = [(k, k2) for k in ("id2label", "label2id") if isinstance(cfg.get(k), dict) for k2 in list(cfg[k])[:5]]
    pool = top * 3 + nested + labels
    return pool or [("model_type",)]


def _copy(x):
    """A deep copy (the base configs are shared by every case a worker runs)."""
    return json.loads(json.dumps(x))


def _get_parent(cfg: dict, path: tuple):
    node = cfg
    for k in path[:-1]:
        node = node.get(k) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            return None
    return node


def _plain_number(x, default: int):
    """``x`` when it is a modest finite number (a previous mutation may have left 10**400 there)."""
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and abs(x) < 2**62 and math.isfinite(x)
    return x if ok else default


def _weird_value(rng: random.Random, orig=None):
    n = _plain_number(orig, 7)
    choices = [
        lambda: str(orig),
        lambda: "",
        lambda: "abc",
        lambda: "12",
        lambda: "1e9",
        lambda: "NaN",
        lambda: [],
        lambda: [orig],
        lambda: [1, 2, 3],
        lambda: [[1], [2]],
        lambda: {},
        lambda: {"a": 1},
        lambda: {"hidden_size": -1},
        lambda: None,
        lambda: float("nan"),
        lambda: float("inf"),
        lambda: float("-inf"),
        lambda: 2**31,
        lambda: 2**63,
        lambda: 2**64,
        lambda: 10**30,
        lambda: 10**300,
        lambda: -(2**63),
        lambda: -1,
        lambda: -2,
        lambda: -n,
        lambda: n + 0.5,
        lambda: float(n),
        lambda: 1e-9,
        lambda: 1e308,
        lambda: True,
        lambda: False,
        lambda: 0,
    ]
    return rng.choice(choices)()


def _size_value(rng: random.Random, orig):
    n = _plain_number(orig, 8)
    n = n if isinstance(n, int) else 8
    return rng.choice([0, -1, -3, 1, 2, 3, 2**20, 2**21 + 1, 2**31, 10**12, n * 1000, n + 1, n - 1, n // 3 or 1, n + 0.5, float(n), str(n), None, True, [n, n], [], [0], float("nan"), 10**400])


def _mutate_tree(cfg: dict, rng: random.Random, configs: dict) -> str:
    kind = rng.choice(["delete", "wrong_type", "size", "size", "names", "subconfig", "unicode", "add"])
    if kind == "delete":
        path = rng.choice(_paths(cfg, rng))
        parent = _get_parent(cfg, path)
        if parent is not None:
            parent.pop(path[-1], None)
        return f"delete {'.'.join(path)}"
    if kind == "wrong_type":
        path = rng.choice(_paths(cfg, rng))
        parent = _get_parent(cfg, path)
        if parent is not None:
            parent[path[-1]] = _weird_value(rng, parent.get(path[-1]))
        return f"wrong_type {'.'.join(path)}"
    if kind == "size":
        present = [f for f in SIZE_FIELDS if f in cfg]
        sub = [(k, f) for k in SUB_CONFIGS if isinstance(cfg.get(k), dict) for f in SIZE_FIELDS if f in cfg[k]]
        options = [(f,) for f in present] + sub or [(rng.choice(SIZE_FIELDS),)]
        path = rng.choice(options) if rng.random() < 0.85 else (rng.choice(SIZE_FIELDS),)
        parent = _get_parent(cfg, path)
        if parent is not None:
            parent[path[-1]] = _size_value(rng, parent.get(path[-1]))
        return f"size {'.'.join(path)}"
    if kind == "names":
        other = rng.choice(list(configs.values()))
        if rng.random() < 0.5:
            cfg["model_type"] = _copy(rng.choice([other.get("model_type"), *EXOTIC_TYPES, None, 5, ["llama"]]))
            return "names model_type"
        cfg["architectures"] = _copy(
            rng.choice([other.get("architectures"), [rng.choice(EXOTIC_ARCHS)], rng.choice(EXOTIC_ARCHS), [], None, [None], [1], [rng.choice(EXOTIC_ARCHS), rng.choice(EXOTIC_ARCHS)]])
        )
        return "names architectures"
    if kind == "subconfig":
        key = rng.choice(SUB_CONFIGS)
        other = rng.choice(list(configs.values()))
        cfg[key] = rng.choice(
            [
                [],
                "x",
                None,
                3,
                {},
                {"model_type": "bogus"},
                {"model_type": "llama", "hidden_size": -1},
                {"hidden_size": 0},
                _copy(other),
                {"rope_type": "yarn", "factor": "x"},
                {"type": "dynamic", "factor": 0.5},
                {"rope_type": "linear", "factor": 0},
                {"rope_type": "llama3", "factor": 8.0},
                {"rope_type": "nope"},
                {"quant_method": "bitsandbytes", "load_in_4bit": True},
                {"quant_method": "gptq", "bits": 4},
                {"model_type": other.get("model_type"), **{k: _copy(v) for k, v in other.items() if k in SIZE_FIELDS}},
            ]
        )
        return f"subconfig {key}"
    if kind == "unicode":
        path = rng.choice(_paths(cfg, rng))
        parent = _get_parent(cfg, path)
        text = rng.choice(["\u00e9\u00e8", "\U0001f999" * 50, "\u0000\u0001\u001f", "\ud800", "a\nb\r\nc", "\u202e", "x" * 1_000_000, "\u4e2d\u6587" * 1000, "'\"\\"])
        if parent is not None:
            if rng.random() < 0.5:
                parent[path[-1]] = text
            else:
                parent[text[:200]] = parent.get(path[-1])
        return f"unicode {'.'.join(path)}"
    # add: unknown fields, some with size-like names
    name = rng.choice(
        [
            "num_hidden_layers_2",
            "hidden_size_extra",
            "num_experts",
            "n_routed_experts",
            "moe_layer_freq",
            "rope_theta",
            "max_seq_len",
            "layer_types",
            "sliding_window",
            "torch_dtype",
            "use_cache",
            "tie_word_embeddings",
            "attn_implementation",
            "_attn_implementation",
            "trust_remote_code",
            "auto_map",
            "num_labels",
            "problem_type",
            "\u00fcber_size",
        ]
    )
    cfg[name] = _weird_value(rng, 4) if rng.random() < 0.7 else rng.choice(["eager", "flash_attention_2", "float8", ["full_attention"] * 3])
    return f"add {name}"


def _dumps(cfg) -> str:
    return json.dumps(cfg, indent=1, ensure_ascii=rng_ascii[0])


rng_ascii = [False]  # json.dumps flag, set per case


def _text_mutation(text: str, cfg: dict, rng: random.Random) -> tuple[str, str | bytes]:
    kind = rng.choice(["duplicate", "deep", "non_object", "corrupt"])
    if kind == "duplicate":
        key = rng.choice(list(cfg) or ["model_type"])
        value = _weird_value(rng, cfg.get(key)) if rng.random() < 0.5 else cfg.get(key)
        try:
            dup = json.dumps({key: value})[1:-1]
        except ValueError:
            dup = json.dumps({key: 1})[1:-1]
        return f"duplicate {key}", ("{" + dup + "," + text.lstrip()[1:]) if rng.random() < 0.5 else (text.rstrip()[:-1] + "," + dup + "}")
    if kind == "deep":
        depth = rng.choice([33, 100, 1000, 100_000])
        opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
        nested = opener * depth + "1" + closer * depth
        return f"deep {depth}", text.rstrip()[:-1] + ', "nested": ' + nested + "}"
    if kind == "non_object":
        return "non_object", rng.choice(["[]", "1", '"config"', "null", "true", "", " ", "[{}]", "[" + text + "]", "1e999", "-0", "NaN"])
    raw = text.encode("utf-8", "surrogatepass")
    how = rng.choice(["truncate", "flip", "invalid_utf8", "bom", "comment", "trailing", "nul"])
    if how == "truncate":
        raw = raw[: rng.randrange(0, max(len(raw), 1))]
    elif how == "flip" and raw:
        i = rng.randrange(len(raw))
        raw = raw[:i] + bytes([raw[i] ^ (1 << rng.randrange(8))]) + raw[i + 1 :]
    elif how == "invalid_utf8":
        i = rng.randrange(len(raw) or 1)
        raw = raw[:i] + b"\xff\xfe\xc3" + raw[i:]
    elif how == "bom":
        raw = b"\xef\xbb\xbf" + raw
    elif how == "comment":
        raw = b"// a comment\n" + raw
    elif how == "trailing":
        raw = raw + b" garbage"
    elif how == "nul":
        raw = raw + b"\x00"
    return f"corrupt {how}", raw


def make_case(i: int, configs: dict, seed: int = SEED, rng: random.Random | None = None) -> tuple[str, str, bytes]:
    """Case ``i``: (base model id, what was done, the config.json bytes)."""
    rng = rng or random.Random(f"{seed}:{i}")
    base_id = rng.choice(sorted(configs))
    cfg = _copy(configs[base_id])
    done = [_mutate_tree(cfg, rng, configs) for _ in range(rng.choice([1, 1, 2, 3]))]
    rng_ascii[0] = rng.random() < 0.3
    try:
        text = _dumps(cfg)
    except (ValueError, TypeError):
        text = json.dumps(cfg, ensure_ascii=True)
    if rng.random() < 0.25:
        kind, out = _text_mutation(text, cfg, rng)
        done.append(kind)
    else:
        out = text
    data = out if isinstance(out, bytes) else out.encode("utf-8", "surrogatepass")
    return base_id, "; ".join(done), data


# --------------------------------------------------------------------------
# Running one case (in this process) and classifying the outcome
# --------------------------------------------------------------------------


def classify(rc, out: str, err: str, escaped: BaseException | None = None, fmt: str = "json") -> tuple[str, str]:
    """(outcome, message) of one CLI run."""
    lines = [line for line in err.strip().splitlines() if line.strip()]
    message = lines[0][:300] if lines else ""
    if escaped is not None:
        return "crash", f"exception escaped main: {type(escaped).__name__}: {str(escaped).splitlines()[0][:200] if str(escaped) else ''}"
    if "Traceback" in err:
        return "crash", "traceback on stderr: " + message
    if rc == 0:
        if fmt != "json":
            return ("report", "") if out.strip() else ("crash", "exit 0 with nothing on stdout")
        try:
            doc = json.loads(out)
        except ValueError:
            return "crash", "exit 0 without a JSON report"
        return ("report", "") if isinstance(doc, dict) and "model" in doc else ("crash", "exit 0, report lacks 'model'")
    if rc == 2 and len(lines) == 1 and lines[0].startswith("neurarch-trace: error: "):
        if "took longer than" in lines[0]:
            return "timeout", message
        return "error", message
    if rc == 2:
        return "crash", f"exit 2 with {len(lines)} lines on stderr: " + message
    return "crash", f"exit {rc}: " + message


def _stream(errors: str) -> io.TextIOWrapper:
    # Like the real streams: UTF-8 stdout is strict (a lone surrogate would fail there),
    # stderr replaces what it cannot encode.
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors=errors, write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    return stream.buffer.getvalue().decode("utf-8", "replace")


def run_in_process(data: bytes, workdir: Path, fmt: str = "json") -> tuple[str, str]:
    """Write ``data`` as a config.json and run the CLI on it here; (outcome, message)."""
    from neurarch.cli import main

    path = workdir / "config.json"
    path.write_bytes(data)
    out, err = _stream("strict"), _stream("backslashreplace")
    escaped = None
    rc = None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main([str(path), "--format", fmt, *CLI_ARGS])
    except SystemExit as e:  # argparse
        rc = e.code
    except BaseException as e:  # noqa: BLE001 - anything escaping main is the finding
        if isinstance(e, KeyboardInterrupt):
            raise
        escaped = e
    return classify(rc, _text(out), _text(err), escaped, fmt)


# --------------------------------------------------------------------------
# The worker (a child process) and the parent that watches it
# --------------------------------------------------------------------------


def _worker(seed: int, result_fd: int) -> None:
    """Read case numbers on stdin, write one JSON result per line to ``result_fd``."""
    import warnings

    warnings.simplefilter("ignore")
    configs = base_configs()
    results = os.fdopen(result_fd, "w", buffering=1)
    with tempfile.TemporaryDirectory(prefix="neurarch-fuzz-") as tmp:
        for line in sys.stdin:
            i = int(line)
            t0 = time.monotonic()
            try:
                base_id, what, data = make_case(i, configs, seed)
            except Exception as e:  # noqa: BLE001 - a bug in this harness, not in neurarch: say so, go on
                results.write(json.dumps({"case": i, "base": "?", "mutation": "?", "outcome": "harness", "message": f"making the case failed: {type(e).__name__}: {e}", "seconds": 0}) + "\n")
                continue
            outcome, message = run_in_process(data, Path(tmp), FORMATS[i % len(FORMATS)])
            results.write(json.dumps({"case": i, "base": base_id, "mutation": what, "outcome": outcome, "message": message, "seconds": round(time.monotonic() - t0, 3)}) + "\n")


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class Worker:
    def __init__(self, seed: int):
        r, w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", "--seed", str(seed), "--result-fd", str(w)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            pass_fds=(w,),
            start_new_session=True,
            cwd=tempfile.gettempdir(),
        )
        os.close(w)
        self.results = os.fdopen(r, "r")

    def run(self, i: int, timeout: float, memory: int) -> dict | None:
        """The result of case ``i``; None with ``self.why`` set when the worker had to be killed."""
        self.proc.stdin.write(f"{i}\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            ready, _, _ = select.select([self.results], [], [], 0.5)
            if ready:
                line = self.results.readline()
                if line:
                    return json.loads(line)
                self.why = "crash"  # the worker died (segfault, abort)
                return None
            if time.monotonic() > deadline:
                self.why = "hang"
                return None
            if _rss(self.proc.pid) > memory:
                self.why = "memory"
                return None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.results.close()


def done_cases(path: Path) -> dict[int, dict]:
    out = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError, KeyError):
                row = json.loads(line)
                out[row["case"]] = row
    return out


def _code_version() -> str:
    """The git commit the cases ran on (``+dirty`` with uncommitted changes under src/)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + ("+dirty" if dirty else "")


def run(cases: int, results: Path, seed: int, timeout: float, memory: int, verbose: bool, budget_s: float | None) -> None:
    version = _code_version()
    done = done_cases(results)
    todo = [i for i in range(cases) if i not in done]
    print(f"{len(done)} cases already in {results}; {len(todo)} to run", file=sys.stderr)
    results.parent.mkdir(parents=True, exist_ok=True)
    worker = Worker(seed)
    started = time.monotonic()
    configs = None
    try:
        with open(results, "a") as f:
            for n, i in enumerate(todo):
                if budget_s is not None and time.monotonic() - started > budget_s:
                    print(f"time budget of {budget_s:g} s spent; rerun to resume", file=sys.stderr)
                    break
                t0 = time.monotonic()
                row = worker.run(i, timeout, memory)
                if row is None:
                    why = worker.why
                    worker.kill()
                    worker = Worker(seed)
                    if configs is None:
                        configs = base_configs()
                    try:
                        base_id, what, _ = make_case(i, configs, seed)
                    except Exception:  # noqa: BLE001 - recorded by the worker's own row
                        base_id, what = "?", "?"
                    row = {
                        "case": i,
                        "base": base_id,
                        "mutation": what,
                        "outcome": why,
                        "message": f"worker killed ({why}) after {time.monotonic() - t0:.1f} s",
                        "seconds": round(time.monotonic() - t0, 3),
                    }
                row["code"] = version
                row["seed"] = seed
                f.write(json.dumps(row) + "\n")
                f.flush()
                if verbose or row["outcome"] not in ("report", "error"):
                    print(f"[{i}] {row['outcome']:7s} {row['base']}: {row['mutation']} -> {row['message'][:160]}", file=sys.stderr)
                if (n + 1) % 500 == 0:
                    print(f"... {n + 1} of {len(todo)} ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    finally:
        worker.kill()


def summary(results: Path) -> dict:
    rows = list(done_cases(results).values())
    counts = Counter(r["outcome"] for r in rows)
    kinds = Counter(m.split()[0] for r in rows for m in r["mutation"].split("; "))
    errors = Counter(_error_kind(r["message"]) for r in rows if r["outcome"] == "error")
    return {
        "cases": len(rows),
        "outcomes": dict(sorted(counts.items())),
        "mutations": dict(sorted(kinds.items())),
        "error_kinds": dict(errors.most_common(25)),
        "seconds": round(sum(r["seconds"] for r in rows), 1),
        "code": dict(Counter(r.get("code", "unknown") for r in rows)),
        "seed": sorted({r.get("seed", SEED) for r in rows}),
        "failures": [r for r in rows if r["outcome"] not in ("report", "error", "timeout")][:50],
        "machine": f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()})",
    }


def _error_kind(message: str) -> str:
    """A coarse label for a clean error message (for the summary table)."""
    m = message.removeprefix("neurarch-trace: error: ")
    for needle, label in [
        ("malformed JSON", "malformed JSON"),
        ("not UTF-8", "not UTF-8"),
        ("must hold a JSON object", "not a JSON object"),
        ("appears twice", "duplicate key"),
        ("nests", "nesting too deep"),
        ("is NaN", "NaN"),
        ("must be a positive size", "zero/negative size"),
        ("must be a positive integer", "mistyped size"),
        ("must be an integer", "fractional size"),
        ("beyond neurarch's", "beyond a bound"),
        ("is negative", "negative value"),
        ("unknown model_type", "unknown model_type"),
        ("no model_type", "no model_type"),
        ("field model_type", "bad model_type"),
        ("field architectures", "bad architectures"),
        ("needs remote code", "remote code refused"),
        ("transformers rejects", "config class rejects"),
        ("building ", "build failed"),
        ("has no model class", "no model class"),
        ("input", "inputs"),
        ("not a list", "empty list"),
    ]:
        if needle in m:
            return label
    return "other: " + m[:80]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=10_000, help="run cases 0..N-1 (those not yet in the results file)")
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help=f"JSONL results file (default {DEFAULT_RESULTS.relative_to(ROOT)})")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--timeout", type=float, default=CASE_TIMEOUT_S, help="wall-clock seconds per case before the worker is killed")
    p.add_argument("--memory-gb", type=float, default=MEMORY_LIMIT_BYTES / (1 << 30), help="worker RSS limit")
    p.add_argument("--budget", type=float, help="stop after this many seconds (resume later)")
    p.add_argument("--summary", action="store_true", help="print the counts in the results file and exit")
    p.add_argument("--show", type=int, metavar="CASE", help="print case CASE's config.json and exit")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--result-fd", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    if args.worker:
        _worker(args.seed, args.result_fd)
        return 0
    if args.show is not None:
        base_id, what, data = make_case(args.show, base_configs(), args.seed)
        print(f"# case {args.show}: {base_id}: {what}", file=sys.stderr)
        sys.stdout.buffer.write(data)
        return 0
    if not args.summary:
        run(args.cases, args.results, args.seed, args.timeout, int(args.memory_gb * (1 << 30)), args.verbose, args.budget)
    s = summary(args.results)
    print(json.dumps({k: v for k, v in s.items() if k != "failures"}, indent=2))
    for r in s["failures"]:
        print(f"FAILURE [{r['case']}] {r['outcome']} {r['base']}: {r['mutation']} -> {r['message']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
