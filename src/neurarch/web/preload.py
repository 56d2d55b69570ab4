"""Imported by the ``serve --warm`` sweep's supervisor before it forks any item.

Importing this module runs :func:`neurarch.web.worker.warm`: torch, transformers'
modeling base, peft, bitsandbytes and the cost's op count, as a pool worker
imports them at start.  Each warm item is forked from the supervisor and forks
its plan's mode jobs in turn; without this they would import peft and
bitsandbytes again in every item's children.  A library that is missing or
raises on import is left out (warm() tolerates it): the modes that need it
report it in their section, as in a pool worker.
"""

from __future__ import annotations

from .worker import warm

warm()
