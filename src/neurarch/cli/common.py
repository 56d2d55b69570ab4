"""What every command shares: exit codes and writing the output."""

from __future__ import annotations

import sys
from pathlib import Path

EXIT_USAGE = 2  # a problem with the input: one line on stderr
EXIT_BUG = 1  # a bug: one line unless --debug


def write(text: str, path: str | None) -> None:
    if path:
        Path(path).write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
