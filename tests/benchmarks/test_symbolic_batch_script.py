"""benchmarks/symbolic_batch.py: the probe's comparison finds a match where there is one and a
difference where there is one.

One symbolic-batch pass of a tiny BERT, its shapes evaluated at batches 4 and 7, is the numeric
passes at 4 and 7 op for op (the same ops, the same shapes); the tiny Llama's symbolic pass runs
without a guard but differs from the numeric one at an op (what the probe's table in
docs/benchmarks.md reports: a slice where the numeric pass makes an alias).  Should a torch upgrade
make the two the same, the second test fails: rerun the probe and update that table.
"""

from __future__ import annotations

from benchmark_script import load


def test_bert_symbolic_pass_is_the_numeric_passes_at_each_batch():
    sb = load("symbolic_batch")
    sym, env, symbol, _ = sb._pass("bert", 4, True, "sum")
    assert not env.guards
    for b in (4, 7):
        real, *_ = sb._pass("bert", b, False, "sum")
        assert sb._evaluate(sym, symbol, b) == real
    assert any(op.startswith("aten.mm") and shapes and shapes[0][0] == 7 * sb.SEQ for op, shapes in sb._evaluate(sym, symbol, 7))  # the batch reached the matmuls


def test_a_difference_is_found_where_the_ops_differ():
    sb = load("symbolic_batch")
    sym, env, symbol, _ = sb._pass("llama", 4, True, "sum")
    real, *_ = sb._pass("llama", 4, False, "sum")
    assert not env.guards  # nothing in the model's code branched on the batch
    assert sb._evaluate(sym, symbol, 4) != real  # yet the ops are not all the same
