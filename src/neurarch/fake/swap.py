"""A function of torch's swapped for neurarch's, process-wide, while any block that asked for it is open.

:func:`neurarch.fake.cachekey.fast_keys` and :func:`neurarch.fake.views.fast_views`
each put a faster equal of one of FakeTensorMode's functions in place for the
blocks of a simulation, a trace or a cost count.  Blocks nest and may be open on
several threads at once (the web's plans); the swap is made when the first opens
and undone when the last closes, and not made at all where this torch's function
is not the one neurarch's was written against.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable


class Swap:
    """``install()`` when the first block opens, ``restore()`` when the last closes; ``fits()``:
    whether this torch is the one the swap was written for (asked while no block is open)."""

    def __init__(self, install: Callable[[], None], restore: Callable[[], None], fits: Callable[[], bool]):
        self.install, self.restore, self.fits = install, restore, fits
        self.lock = threading.Lock()
        self.depth = [0]  # blocks open now, in this process

    @contextlib.contextmanager
    def block(self):
        if self.depth[0] == 0 and not self.fits():
            yield
            return
        with self.lock:
            self.depth[0] += 1
            self.install()
        try:
            yield
        finally:
            with self.lock:
                self.depth[0] -= 1
                if self.depth[0] == 0:
                    self.restore()
