"""Sweeps: one job over many items (model ids, model types), on dask.distributed.

    from neurarch.sweep import run_sweep, read_results
    records = run_sweep(items, job=fn, results_path="results.jsonl", time_limit_s=600)

Each item runs in its own process under a wall-clock and a memory limit
enforced from outside it (:mod:`neurarch.supervise`); results go to a JSON-lines
file as they finish, and a second run skips what is there.  See docs/sweep.md.
The command line: ``python -m neurarch.sweep --help``.
"""

from .records import SweepRecord, append_result, read_results
from .runner import item_key, iter_sweep, run_sweep

__all__ = ["SweepRecord", "append_result", "item_key", "iter_sweep", "read_results", "run_sweep"]
