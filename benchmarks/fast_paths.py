"""Commands that must answer without importing torch (issue target: <= 0.5 s each).

    python benchmarks/fast_paths.py      # prints a Markdown table

Each command runs in a fresh process (best of 3 wall-clock seconds); the
table also says whether torch or transformers was imported (read from
``python -X importtime``), which is what makes these commands slow when it happens.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time

# name: (argv, the exit code the command must end with); a command that fails some other way is not timed.
CASES = {
    "--help": (["--help"], 0),
    "catalog": (["catalog"], 0),
    "checks": (["checks"], 0),
    "a bad option (--seq-len 0)": (["gpt2", "--seq-len", "0"], 2),
    "a bad plan option (--lora-rank 0)": (["gpt2", "--plan", "--lora-rank", "0"], 2),
    "an unknown rule id (--disable nope)": (["gpt2", "--disable", "nope"], 2),
}


def best(argv: list[str], rc: int, repeats: int = 3) -> tuple[float, bool]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "neurarch.cli", *argv], capture_output=True, text=True, timeout=120)
        times.append(time.perf_counter() - t0)
        if proc.returncode != rc or "internal error" in proc.stderr:
            raise SystemExit(f"neurarch-trace {' '.join(argv)} exited {proc.returncode} (expected {rc}): {proc.stderr.strip()}")
    trace = subprocess.run([sys.executable, "-X", "importtime", "-m", "neurarch.cli", *argv], capture_output=True, text=True, timeout=120).stderr
    heavy = any(line.rstrip().endswith(("| torch", "| transformers")) for line in trace.splitlines())
    return min(times), heavy


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; python {platform.python_version()}; {time.strftime('%Y-%m-%d')}; best of 3 fresh processes\n")
    print("| command | exit code | seconds | imports torch or transformers |")
    print("|---|---:|---:|---|")
    for name, (argv, rc) in CASES.items():
        s, heavy = best(argv, rc)
        print(f"| `neurarch-trace {' '.join(argv)}` ({name}) | {rc} | {s:.2f} | {'yes' if heavy else 'no'} |")


if __name__ == "__main__":
    main()
