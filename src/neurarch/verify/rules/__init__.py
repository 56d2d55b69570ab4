"""The built-in rules, one module per theme.  Importing this package registers them.

Run order is import order: what the output is, then training, attention and
positions, efficiency, memory, inputs, the tokenizer.
"""

from . import attention, efficiency, inputs, memory, output, tokenizer, training  # noqa: F401
