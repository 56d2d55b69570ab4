"""The built-in rules, one module per theme.  Importing this package registers them.

Run order is import order: what the output is, then training, attention and
positions, efficiency, memory, inputs, the tokenizer, the head's tie.  The order is the
report's (``verifier.rules_run``, and findings of one severity), so the
imports below are kept in it, not sorted.
"""

# isort: off
from . import output  # noqa: F401
from . import training  # noqa: F401
from . import attention  # noqa: F401
from . import efficiency  # noqa: F401
from . import memory  # noqa: F401
from . import inputs  # noqa: F401
from . import tokenizer  # noqa: F401
from . import ties  # noqa: F401
# isort: on
