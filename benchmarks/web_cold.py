"""Cold plans in the web app's warm workers: the real server, every catalog model once.

    python benchmarks/web_cold.py                          # the whole catalog, 1 worker
    python benchmarks/web_cold.py --ids gpt2,t5-small      # some models
    python benchmarks/web_cold.py --save benchmarks/web_cold.jsonl   # one JSON line per model; a rerun skips the ids there

It starts ``neurarch-trace serve`` in a subprocess on 127.0.0.1 (its own
process group) with a fresh ``NEURARCH_CACHE_DIR`` and a fresh SQLite store in
a temporary folder, so nothing is answered from a cache, and waits until the
server answers ``/api/v1/status`` (the pool starts answering only once every
worker has done its imports: ``neurarch.web.worker.warm``).  Then, one request
at a time, it asks for each model's page as a browser does: ``GET
/models/{id}`` with ``Accept: text/html`` and no query string, i.e. the web's
default options (``plan`` on: every mode, every card, the cost).  The page is
answered only when its report is computed (there is no "computing" page to
poll), so the time is from sending the request to the last byte of the page.

Per model it records the seconds, the HTTP status, the server's cache verdict
(``miss``: computed now), the server's own time for the request (its access
log), the worker's time for the plan (stored with the report), and whether the
report is complete: every mode's memory section present or explained as not
applicable, the cards and the cost present, no section error (read from the
page's ``.json`` twin, fetched after the timing: a cache hit).  A request that
gets no answer within the server's time limit plus a margin is recorded as a
timeout (status -1), never waited on further.

It prints a Markdown table and p50/p95 over the answered models, with the
machine (CPUs, load average at start and end, date).  Not a test: the figures
depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import html
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

MODES = ("full", "lora", "qlora", "inference")  # neurarch.options.MODES (checked in main)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values: list[float], q: float) -> float:
    """The nearest-rank percentile (q in 0..100) of ``values``."""
    if not values:
        return float("nan")
    v = sorted(values)
    rank = max(1, -(-len(v) * q // 100))  # ceil(n * q / 100), at least 1
    return v[int(rank) - 1]


def completeness(report: dict) -> tuple[bool, list[str], list[str]]:
    """``(complete, missing, not_applicable)`` of one Index JSON report.

    A mode's section is *not applicable* when the memory plan says why it has
    none (``memory.errors`` names it and the section is null: a ResNet has no
    linear layer for QLoRA); it is *missing* when it is null with no reason,
    or when any section error is reported."""
    missing: list[str] = []
    na: list[str] = []
    mem = report.get("memory")
    if not mem:
        missing.append("memory")
    else:
        why = mem.get("errors") or {}
        for m in MODES:
            if mem.get(m):
                continue
            reason = str(why.get(m, ""))
            (na if reason and ("no linear layer" in reason or "not apply" in reason or "n/a" in reason) else missing).append(m if not reason else f"{m}: {reason}")
    if not report.get("cards"):
        missing.append("cards")
    if not report.get("cost"):
        missing.append("cost")
    for section, err in (report.get("errors") or {}).items():
        missing.append(f"{section}: {err}")
    if not (report.get("forward_pass") or {}).get("ok"):
        missing.append("forward_pass")
    if not (report.get("backward_pass") or {}).get("ok"):
        missing.append("backward_pass")
    return not missing, missing, na


def access_ms(log_path: Path, path: str) -> float | None:
    """The server's own time for the last request of ``path`` (its JSON access log)."""
    found = None
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("path") == path and "ms" in rec:
            found = rec["ms"]
    return found


def worker_seconds(db: Path, model_id: str) -> float | None:
    """The plan's time in the worker, as the store keeps it with the report."""
    import sqlite3

    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            row = con.execute("SELECT compute_seconds FROM reports WHERE source = ? ORDER BY id DESC LIMIT 1", (model_id,)).fetchone()
        finally:
            con.close()
    except sqlite3.Error:
        return None
    return None if row is None or row[0] is None else float(row[0])


def machine() -> dict:
    import importlib.metadata as md

    def ver(name):
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return None

    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "torch": ver("torch"),
        "transformers": ver("transformers"),
        "load_average": round(os.getloadavg()[0], 2),
    }


def catalog_ids() -> list[str]:
    out = subprocess.run([sys.executable, "-m", "neurarch.cli", "catalog", "--format", "json"], capture_output=True, text=True, timeout=120, check=True)
    return [e["id"] for e in json.loads(out.stdout)]


class Server:
    """``neurarch-trace serve`` in its own process group, on a fresh cache folder and store."""

    def __init__(self, workers: int, request_timeout: float, tmp: Path):
        self.tmp = tmp
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.db = tmp / "web.db"
        self.log_path = tmp / "serve.log"
        cache = tmp / "cache"
        cache.mkdir()
        env = dict(os.environ, NEURARCH_CACHE_DIR=str(cache), HF_HUB_OFFLINE="1")
        self.log = open(self.log_path, "w")
        cmd = [sys.executable, "-m", "neurarch.cli", "serve", "--port", str(self.port), "--db", f"sqlite:///{self.db}"]
        cmd += ["--workers", str(workers), "--offline", "--request-timeout", str(request_timeout)]
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, limit_s: float = 300.0) -> float:
        t0 = time.monotonic()
        with httpx.Client(base_url=self.base, timeout=10) as c:
            while True:
                try:
                    if c.get("/api/v1/status").status_code == 200:
                        return time.monotonic() - t0
                except httpx.TransportError:
                    pass
                if self.proc.poll() is not None or time.monotonic() - t0 > limit_s:
                    raise SystemExit(f"web_cold: the server did not start; see {self.log_path}")
                time.sleep(0.25)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.log.close()


def one(client: httpx.Client, server: Server, model_id: str, give_up_s: float) -> dict:
    """One cold model page, timed from send to its last byte; then the report's completeness."""
    path = f"/models/{model_id}"
    rec: dict = {"model": model_id}
    t0 = time.perf_counter()
    try:
        r = client.get(path, headers={"accept": "text/html"}, timeout=httpx.Timeout(give_up_s, connect=10))
        rec["seconds"] = round(time.perf_counter() - t0, 2)
        rec["status"] = r.status_code
        rec["cache"] = r.headers.get("x-neurarch-cache")
        rec["page_bytes"] = len(r.content)
        if r.status_code != 200:  # the error page says it in <p id="error">; a JSON error in its message
            found = re.search(r'<p class="bad" id="error">(.*?)</p>', r.text, re.S)
            if found:
                rec["error"] = html.unescape(found.group(1)).strip()
            else:
                try:
                    rec["error"] = r.json()["error"]["message"]
                except Exception:
                    rec["error"] = r.text[:300]
    except httpx.TimeoutException:
        rec.update(seconds=round(time.perf_counter() - t0, 2), status=-1, error=f"no answer within {give_up_s:g} s (client gave up)")
        return rec
    except httpx.TransportError as e:
        rec.update(seconds=round(time.perf_counter() - t0, 2), status=-1, error=f"{type(e).__name__}: {e}")
        return rec
    rec["server_ms"] = access_ms(server.log_path, path)
    rec["worker_s"] = worker_seconds(server.db, model_id)
    if r.status_code == 200:
        j = client.get(f"{path}.json", timeout=60)
        if j.status_code == 200:
            complete, missing, na = completeness(j.json())
            rec.update(complete=complete, missing=missing, not_applicable=na)
        else:
            rec.update(complete=False, missing=[f"json twin: HTTP {j.status_code}"])
    return rec


def table(records: list[dict]) -> str:
    lines = ["| model | seconds | status | worker s | load | complete |", "|---|---:|---:|---:|---:|---|"]
    for r in records:
        if r.get("complete"):
            what = "yes" + (f" ({'; '.join(r['not_applicable'])})" if r.get("not_applicable") else "")
        elif r.get("status") == 200:
            what = "no: " + "; ".join(r.get("missing", []))
        else:
            what = r.get("error", "")[:120]
        ws = r.get("worker_s")
        load = r.get("load_average")
        lines.append(f"| {r['model']} | {r['seconds']:.1f} | {r['status']} | {'' if ws is None else f'{ws:.1f}'} | {'' if load is None else f'{load:.1f}'} | {what} |")
    return "\n".join(lines)


def summary(records: list[dict], head: dict, tail: dict, args) -> str:
    ok = [r["seconds"] for r in records if r.get("status") == 200]
    p50, p95 = pct(ok, 50), pct(ok, 95)
    out = [
        f"machine: {head['machine']}, {head['nproc']} CPUs, python {head['python']}, torch {head['torch']}, transformers {head['transformers']}; "
        f"{head['date']} -> {tail['date']}; load average {head['load_average']} at start, {tail['load_average']} at end",
        f"server: neurarch-trace serve --workers {args.workers} --request-timeout {args.request_timeout:g} --offline; start-up (workers warm) {head.get('startup_s', float('nan')):.1f} s",
        "",
        table(records),
        "",
        f"{len(ok)} of {len(records)} answered 200; {sum(1 for r in records if r.get('complete'))} complete reports.",
        f"p50 {p50:.1f} s (target <= 3 s: {'met' if p50 <= 3 else 'not met'}), p95 {p95:.1f} s (target <= 10 s: {'met' if p95 <= 10 else 'not met'}) over the 200s; max {max(ok) if ok else float('nan'):.1f} s",
    ]
    return "\n".join(out)


# ---------------------------------------------------------------- --phases


def bare_warm() -> None:
    """The worker's start-up imports before it imported what the forked mode
    jobs need (``--phases --bare``: the reference the change is measured against)."""
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import neurarch.pipeline  # noqa: F401
    import neurarch.plan.memory  # noqa: F401
    import neurarch.verify  # noqa: F401
    from neurarch.sources import catalog

    catalog.entries()


def phases(ids: list[str], out_dir: Path, bare: bool = False) -> list[dict]:
    """Where a warm worker's time goes: :func:`neurarch.web.worker.warm`, then
    each id as the worker runs it (:func:`neurarch.web.worker.run_job` with the
    web's default options), its phases timed by wrapping the pipeline's steps
    in this process only.  The memory modes and the cost count run in forked
    children (:class:`neurarch.jobs.Jobs`); each child's job time, and whether
    it had to import peft or bitsandbytes itself, is written to a file here."""
    import functools

    t0 = time.perf_counter()
    from neurarch.web import worker

    if bare:
        bare_warm()
    else:
        worker.warm()
    warm_s = time.perf_counter() - t0
    import neurarch.inputs.prepare as prep
    import neurarch.jobs as jobs_mod
    import neurarch.pipeline as pl
    import neurarch.verify as verify
    import neurarch.warm as warm_mod
    from neurarch.web.options import normalize

    times: dict[str, float] = {}
    child_log = out_dir / "children.jsonl"

    def timed(name, fn):
        @functools.wraps(fn)
        def inner(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                times[name] = times.get(name, 0.0) + time.perf_counter() - t

        return inner

    def in_child(name, fn):
        @functools.wraps(fn)
        def inner(*a, **k):
            had = set(sys.modules)
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                line = {"job": name(a), "pid": os.getpid(), "seconds": round(time.perf_counter() - t, 2)}
                new = sorted(set(sys.modules) - had)
                roots: dict[str, int] = {}
                for m in new:  # what this child had to import itself, by package (two levels for neurarch)
                    parts = m.split(".")
                    root = ".".join(parts[:2]) if parts[0] == "neurarch" else parts[0]
                    roots[root] = roots.get(root, 0) + 1
                line["imported_here"] = roots
                with open(child_log, "a") as fh:
                    fh.write(json.dumps(line) + "\n")

        return inner

    for mod, name in ((pl, "resolve_spec"), (prep, "build"), (prep, "plan_inputs"), (prep, "recipe_model"), (pl, "_start_jobs"), (pl, "trace"), (pl, "build_params"), (pl, "build_structure")):
        setattr(mod, name, timed(name, getattr(mod, name)))
    warm_mod.priced_sections = timed("priced_sections", warm_mod.priced_sections)
    verify.run = timed("verify", verify.run)
    jobs_mod.Jobs.results = timed("wait for the mode jobs", jobs_mod.Jobs.results)
    pl._mode_job = in_child(lambda a: a[-1], pl._mode_job)
    pl._count_job = in_child(lambda a: "cost", pl._count_job)
    values = normalize({})
    rows = [{"model": "(worker start-up: warm())", "seconds": round(warm_s, 2)}]
    for model_id in ids:
        times.clear()
        child_log.write_text("")
        t = time.perf_counter()
        answer = worker.run_job({"kind": "model", "id": model_id, "options": values, "timeout_s": 300.0, "offline": True}, out_dir)
        total = time.perf_counter() - t
        t = time.perf_counter()
        if answer[0] == "ok":
            from neurarch.report import Report

            Report.model_validate_json(answer[1])  # what the server does with the worker's answer
        parse_s = time.perf_counter() - t
        children = [json.loads(x) for x in child_log.read_text().splitlines() if x.strip()]
        rows.append(
            {"model": model_id, "status": answer[0], "seconds": round(total, 2), "phases": {k: round(v, 2) for k, v in times.items()}, "server_parse_s": round(parse_s, 3), "children": children}
        )
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ids", help="comma-separated model ids (default: the whole catalog)")
    p.add_argument("--workers", type=int, default=1, help="the server's --workers (default 1, the server's default)")
    p.add_argument("--request-timeout", type=float, default=300.0, help="the server's --request-timeout, seconds (default 300, the server's default)")
    p.add_argument("--margin", type=float, default=60.0, help="seconds past the server's limit before the client gives up on an answer (default 60)")
    p.add_argument("--save", type=Path, help="JSON lines, one per model (the machine first); ids already there are skipped")
    p.add_argument("--fresh", action="store_true", help="with --save: start the file again instead of resuming it")
    p.add_argument("--keep", action="store_true", help="keep the server's temporary folder (its log, and the store with every report it computed)")
    p.add_argument("--phases", action="store_true", help="no server: time the phases of each plan inside one warm worker process (where the time goes)")
    p.add_argument("--bare", action="store_true", help="with --phases: start the worker with the imports it had before it pre-imported the mode jobs' modules")
    args = p.parse_args(argv)
    if args.workers < 1 or args.request_timeout <= 0 or args.margin < 0:
        p.error("--workers must be at least 1, --request-timeout positive, --margin not negative")

    from neurarch.options import MODES as LIB_MODES

    if tuple(LIB_MODES) != MODES:
        raise SystemExit(f"web_cold: the library's modes are {LIB_MODES}, this script knows {MODES}")
    ids = [i.strip() for i in args.ids.split(",") if i.strip()] if args.ids else catalog_ids()
    if args.phases:
        with tempfile.TemporaryDirectory(prefix="neurarch-webcold-") as tmp:
            os.environ["NEURARCH_CACHE_DIR"] = str(Path(tmp) / "cache")  # nothing from a cache
            os.environ["HF_HUB_OFFLINE"] = "1"
            head = machine()
            rows = phases(ids, Path(tmp), bare=args.bare)
        print(json.dumps({"run": head, "load_average_end": round(os.getloadavg()[0], 2)}))
        for row in rows:
            print(json.dumps(row))
        return 0
    done: list[dict] = []
    earlier: list[dict] = []  # the runs a resumed --save file holds already
    if args.save and args.save.exists() and not args.fresh:
        for line in args.save.read_text().splitlines():
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                if "model" in rec:
                    done.append(rec)
                elif "run" in rec:
                    earlier.append(rec["run"])
        seen = {r["model"] for r in done}
        ids = [i for i in ids if i not in seen]
    elif args.save:
        args.save.write_text("")
    head = machine()
    records = list(done)

    def stop(signum, frame):  # SIGTERM, and SIGINT where a background shell ignored it: the server goes too
        raise SystemExit(f"web_cold: stopped by signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if ids:
        tmp = Path(tempfile.mkdtemp(prefix="neurarch-webcold-"))
        server = Server(args.workers, args.request_timeout, tmp)
        try:
            head["startup_s"] = round(server.wait_ready(), 1)
            if args.save:
                with open(args.save, "a") as fh:
                    fh.write(json.dumps({"run": head, "workers": args.workers, "request_timeout": args.request_timeout}) + "\n")
            give_up = args.request_timeout + args.margin
            with httpx.Client(base_url=server.base) as client:
                for model_id in ids:
                    rec = one(client, server, model_id, give_up)
                    rec["load_average"] = round(os.getloadavg()[0], 2)
                    records.append(rec)
                    print(f"{model_id}: {rec['seconds']:.1f} s, HTTP {rec['status']}, {'complete' if rec.get('complete') else rec.get('missing') or rec.get('error')}", file=sys.stderr, flush=True)
                    if args.save:
                        with open(args.save, "a") as fh:
                            fh.write(json.dumps(rec) + "\n")
                    if rec["status"] == -1 and server.proc.poll() is not None:
                        print("web_cold: the server died; see " + str(server.log_path), file=sys.stderr)
                        break
        finally:
            server.stop()
            if args.keep:
                print(f"web_cold: the server's folder (log, store with every report, cache) is kept in {tmp}", file=sys.stderr)
            else:
                shutil.rmtree(tmp, ignore_errors=True)
    tail = machine()
    for run in earlier:
        print(f"(earlier run in {args.save}: {run['date']}, load average {run['load_average']} at start, start-up {run.get('startup_s', float('nan')):.1f} s)")
    print(summary(records, head, tail, args))
    print("(worker s: the plan's time in the worker, as the store keeps it; load: the 1-minute load average when the answer came)")
    return 0 if records and all(r.get("status") == 200 for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
