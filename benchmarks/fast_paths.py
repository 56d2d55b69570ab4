"""Commands that must answer without importing torch (issue target: <= 0.5 s each).

    python benchmarks/fast_paths.py      # prints a Markdown table

Each command runs in a fresh process (best of 3 wall-clock seconds); the
table also says whether torch or transformers was imported (read from
``python -X importtime``), which is what makes these commands slow when it happens.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time

CASES = {
    "--help": ["--help"],
    "catalog": ["catalog"],
    "checks": ["checks"],
    "a bad option (--seq-len 0)": ["gpt2", "--seq-len", "0"],
    "a bad plan option (--lora-rank 0)": ["gpt2", "--plan", "--lora-rank", "0"],
    "an unknown rule id (--disable nope)": ["gpt2", "--disable", "nope"],
}


def best(argv: list[str], repeats: int = 3) -> tuple[float, bool]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "neurarch.cli", *argv], capture_output=True, timeout=120)
        times.append(time.perf_counter() - t0)
    trace = subprocess.run([sys.executable, "-X", "importtime", "-m", "neurarch.cli", *argv], capture_output=True, text=True, timeout=120).stderr
    heavy = any(line.rstrip().endswith(("| torch", "| transformers")) for line in trace.splitlines())
    return min(times), heavy


def main() -> None:
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; python {platform.python_version()}; {time.strftime('%Y-%m-%d')}; best of 3 fresh processes\n")
    print("| command | seconds | imports torch or transformers |")
    print("|---|---:|---|")
    for name, argv in CASES.items():
        s, heavy = best(argv)
        print(f"| `neurarch-trace {' '.join(argv)}` ({name}) | {s:.2f} | {'yes' if heavy else 'no'} |")


if __name__ == "__main__":
    main()
