"""What importing bitsandbytes costs a QLoRA job, in a plan's worker and elsewhere.

    python benchmarks/bnb_import.py      # prints a Markdown table

bitsandbytes wraps its CPU kernels in ``torch.compile`` as it is imported, which
imports torch's compiler.  A plan's worker processes only simulate, so they import
it with each kernel's compiling left to its first call
(``neurarch.plan.train.adapters.simulation_only``).  Each row: fresh Python
processes that import torch, transformers and neurarch's adapters first, then time
the import QLoRA makes (``adapters._bnb()``), best of 3; and whether torch's
compiler (``torch._inductor.compile_fx``) was imported by then.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

CHILD = r"""
import json, sys, time
import torch, transformers, torch._dynamo  # noqa: F401  (a simulation has imported these by then)
from neurarch.plan.train import adapters
if sys.argv[1] == "worker":
    adapters.simulation_only()
t0 = time.perf_counter()
adapters._bnb()
print(json.dumps([time.perf_counter() - t0, "torch._inductor.compile_fx" in sys.modules]))
"""

ROWS = [("a process that may run kernels for real (the CLI's parent, a library caller, --measure)", "plain"), ("a plan's worker process (it only simulates)", "worker")]


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; python {platform.python_version()}")
    print("best of 3 fresh processes\n")
    print("| process | import bitsandbytes s | torch's compiler imported |")
    print("|---|---:|---|")
    for name, kind in ROWS:
        runs = []
        for _ in range(3):
            res = subprocess.run([sys.executable, "-c", CHILD, kind], capture_output=True, text=True, check=True)
            runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
        best = min(runs)
        print(f"| {name} | {best[0]:.2f} | {'yes' if best[1] else 'no'} |")


if __name__ == "__main__":
    main()
