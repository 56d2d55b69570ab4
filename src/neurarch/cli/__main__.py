"""``python -m neurarch.cli`` is ``neurarch-trace``."""

import sys

from . import main

sys.exit(main())
