"""Fuzzed config.json files: every outcome is a report or one clean line, never a crash.

The mutations are benchmarks/fuzz.py's (every catalog config cut to 2 layers:
fields deleted, wrong types, NaN/Infinity, huge/negative/fractional sizes,
unknown names, broken sub-configs, unicode and very long strings, duplicate
keys, deep nesting, non-object JSON, corrupt bytes), driven here by
hypothesis with a fixed seed (``derandomize``) and run through the CLI's own
entry in-process.  The long run (10,000+ cases, resumable, with hangs and
memory watched from a parent process) is ``benchmarks/fuzz.py``; its counts
are in docs/reliability.md.

``NEURARCH_FUZZ_EXAMPLES`` sets the number of hypothesis examples (default
100: about 30-60 s on two cores, most mutated configs being refused before
anything is built).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from benchmark_script import load  # noqa: E402

fuzz = load("fuzz", "neurarch_fuzz")

EXAMPLES = int(os.environ.get("NEURARCH_FUZZ_EXAMPLES", "100"))
CASE_LIMIT_S = 90  # a hang past this fails the test (neurarch's own --timeout is 40 s)

settings.register_profile(
    "neurarch-ci",
    derandomize=True,  # a fixed seed: the same examples on every run
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)

CONFIGS = fuzz.base_configs()
SEEN: dict[str, int] = {}


class _Hang(Exception):
    pass


def _run_bounded(data: bytes, workdir: Path, fmt: str):
    def on_alarm(signum, frame):
        raise _Hang()

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(CASE_LIMIT_S)
    try:
        return fuzz.run_in_process(data, workdir, fmt)
    except _Hang:
        return "hang", f"no answer within {CASE_LIMIT_S} s"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@settings(settings.get_profile("neurarch-ci"))
@given(case=st.integers(min_value=0, max_value=2**40), fmt=st.sampled_from(fuzz.FORMATS))
def test_fuzzed_configs_never_crash(tmp_path_factory, case, fmt):
    # hypothesis picks case numbers; each is expanded by the benchmark's own
    # generator (uniform over mutations whatever number is drawn), so a failure
    # reproduces with `python benchmarks/fuzz.py --seed 20261201 --show CASE`.
    workdir = tmp_path_factory.mktemp("fuzz")
    base_id, what, data = fuzz.make_case(case, CONFIGS)
    outcome, message = _run_bounded(data, workdir, fmt)
    SEEN[outcome] = SEEN.get(outcome, 0) + 1
    assert outcome in ("report", "error", "timeout"), f"case {case}: {outcome}: {base_id}: {what} -> {message}"
    if outcome != "report":
        assert "\n" not in message and "Traceback" not in message


def test_the_fuzz_run_saw_both_outcomes():
    # Runs after the fuzz test (file order): the examples exercised both paths.
    if not SEEN:
        pytest.skip("the fuzz test did not run")
    assert SEEN.get("report", 0) > 0 and SEEN.get("error", 0) > 0, SEEN


@pytest.mark.parametrize(
    "text,needle",
    [
        (b"[]", "JSON object"),
        (b"null", "JSON object"),
        (b"", "malformed JSON"),
        (b"\xef\xbb\xbf{}", "malformed JSON"),
        (b'{"model_type": "llama", "hidden_size": 8, "hidden_size": 16}', "appears twice"),
        (b'{"model_type": "llama", "rope_theta": NaN}', "NaN"),
        (b'{"model_type": "llama", "vocab_size": 1e400}', "vocab_size"),
        (b'{"model_type": "llama", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nests too deeply"),
        (b'{"model_type": "\\ud800"}', "unknown model_type"),
        (b'{"model_type": "llama", "num_labels": 1e30}', "num_labels"),
        (b'{"model_type": "vit", "architectures": ["PreTrainedModel"]}', "abstract base"),
        (b'{"model_type": "llama", "architectures": ["Conv1D"]}', "layer class"),
        (b'{"model_type": "llama", "bos_token_id": 1.5}', "bos_token_id"),
        # fuzz case 3127: a 400-digit d_model (d_model is no "*_size" name) overflowed float() in the parameter estimate
        (b'{"model_type": "bart", "d_model": 1' + b"0" * 400 + b"}", "d_model"),
        (b'{"model_type": "gpt2", "n_positions": 1' + b"0" * 400 + b"}", "n_positions"),
    ],
)
def test_known_hard_cases_are_one_clean_line(tmp_path, text, needle):
    outcome, message = fuzz.run_in_process(text, tmp_path)
    assert outcome == "error" and needle in message, (outcome, message)


def test_classify():
    assert fuzz.classify(0, json.dumps({"model": {}}), "")[0] == "report"
    assert fuzz.classify(2, "", "neurarch-trace: error: x: field y\n")[0] == "error"
    assert fuzz.classify(2, "", "neurarch-trace: error: a\n  b\n")[0] == "crash"
    assert fuzz.classify(1, "", "neurarch-trace: internal error: KeyError: 'x'\n")[0] == "crash"
    assert fuzz.classify(0, "not json", "")[0] == "crash"
    assert fuzz.classify(None, "", "", RuntimeError("boom"))[0] == "crash"


def test_cases_are_reproducible():
    a = fuzz.make_case(123, CONFIGS)
    b = fuzz.make_case(123, CONFIGS)
    assert a == b and a != fuzz.make_case(124, CONFIGS)
