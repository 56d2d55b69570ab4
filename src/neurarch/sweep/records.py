"""The results file of a sweep: one JSON object per line, one line per finished item.

A line is written as soon as its item finishes, so a sweep that stops (killed,
interrupted, the machine rebooted) keeps what it had; running it again with the
same results file skips the items already in it.  A last line cut short by a
kill is ignored on reading.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..supervise import STATUSES


@dataclass
class SweepRecord:
    """What became of one item of a sweep."""

    key: str  # the item's name in the results file (resume skips keys already there)
    item: Any  # the item as given (a model id, or any JSON value)
    status: str  # "ok" | "error" | "timeout" | "hang" | "memory" | "crash" (see neurarch.supervise)
    value: Any = None  # the job's answer (JSON) when ok
    error: str = ""  # one line, for every status but ok
    seconds: float = 0.0  # the item's wall clock, in its own process
    peak_rss_bytes: int = 0  # the most resident memory its processes held together
    progress: Any = None  # the last value the job reported with neurarch.supervise.progress()
    exit_code: int | None = None  # the item process's exit code, -N when signal N ended it
    stderr_tail: list[str] = field(default_factory=list)  # its last lines on stderr (a crash's clue)
    worker: str = ""  # host:pid of the dask worker that ran it
    finished: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}: one of {', '.join(STATUSES)}")

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict) -> "SweepRecord":
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in names})


def read_results(path: str | os.PathLike) -> dict[str, SweepRecord]:
    """``{key: record}`` from a results file (the last line for a key wins); {} when there is none."""
    out: dict[str, SweepRecord] = {}
    p = Path(path)
    if not p.exists():
        return out
    with open(p, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                d = json.loads(line)
                rec = SweepRecord.from_dict(d)
            except (ValueError, TypeError):  # a line cut short by a kill, or not one of ours
                continue
            out[rec.key] = rec
    return out


def append_result(path: str | os.PathLike, record: SweepRecord) -> None:
    """Add one line to the results file and push it to disk."""
    line = record.to_json() + "\n"
    with open(path, "a+b") as fh:
        if fh.tell() > 0:  # a line cut short by a kill must not swallow this one
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                line = "\n" + line
        fh.write(line.encode("utf-8"))
        fh.flush()
        os.fsync(fh.fileno())
