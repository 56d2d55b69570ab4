"""``neurarch-trace``: thin commands over the library.

    neurarch-trace MODEL ...        the report (trace.py; the default command)
    neurarch-trace catalog          the bundled catalog (catalog.py)
    neurarch-trace checks           the verifier's rules (checks.py)
    neurarch-trace measure MODEL    real steps beside the estimate (measure.py)
    neurarch-trace sweep ...        many models under limits (neurarch.sweep)
    neurarch-trace changes / diff   upstream revisions (neurarch.changes)
    neurarch-trace serve            the web app and API (neurarch.web)

Adding a command is one line in :data:`COMMANDS` (module, function taking the
argument list and returning the exit code); its module is imported only when
it runs, so ``--help`` and ``catalog`` start in a fraction of a second.

Every problem with the input is one line on stderr and exit code 2; a bug is
one line and exit code 1 (``--debug`` shows the traceback).
"""

from __future__ import annotations

import sys

from ..errors import NeurarchError
from .common import EXIT_BUG

COMMANDS = {
    "catalog": ("neurarch.cli.catalog", "run"),
    "checks": ("neurarch.cli.checks", "run"),
    "measure": ("neurarch.cli.measure", "run"),
    "sweep": ("neurarch.sweep.cli", "main"),
    "changes": ("neurarch.changes.cli", "run_changes"),
    "diff": ("neurarch.changes.cli", "run_diff"),
    "serve": ("neurarch.web.cli", "main"),
}
DEFAULT = ("neurarch.cli.trace", "run")


def _command(name: str | None):
    import importlib

    module, func = COMMANDS[name] if name is not None else DEFAULT
    return getattr(importlib.import_module(module), func)


def main(argv: list[str] | None = None) -> int:
    """The command line.  As the console command (``argv`` None) each model runs in a child process under
    the parent's time and memory limits; ``main([...])`` from Python runs in this process."""
    supervised = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        if argv and argv[0] in COMMANDS:
            return _command(argv[0])(argv[1:])
        return _command(None)(argv, supervised=supervised)
    except NeurarchError as e:
        if debug:
            raise
        print(f"neurarch-trace: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("neurarch-trace: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # a bug: one line unless --debug
        if debug:
            raise
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"neurarch-trace: internal error: {type(e).__name__}: {msg} (run with --debug for the traceback)", file=sys.stderr)
        return EXIT_BUG
