"""Fixture: a model file importing a helper module beside it."""

from sibling_block import Block  # tests/models/sibling_block.py


def build():
    return Block(8)
