"""``python:FILE.py:Factory`` sources: the user's own model file.

Expected counts are worked out by hand from the fixture in tests/models/tied_mlp.py,
never read back from neurarch.
"""

import sys
from pathlib import Path

import pytest

from neurarch import analyze
from neurarch.errors import BuildError, InputError, NeurarchError, SourceNotFoundError
from neurarch.inputs import InputOptions
from neurarch.pipeline import Options
from neurarch.sources import resolve

MODELS = Path(__file__).resolve().parents[1] / "models"
TIED = f"python:{MODELS / 'tied_mlp.py'}"

# TiedWeightsModel(vocab=100, dim=16, hidden=32), by hand:
#   embed  Embedding(100, 16)          100*16      = 1,600
#   up     Linear(16, 32)              16*32 + 32  =   544
#   down   Linear(32, 16)              32*16 + 16  =   528
#   head   Linear(16, 100, no bias)    tied to embed.weight: 0 new scalars
#   total                                           2,672
TIED_PARAMS = 1_600 + 544 + 528
# make_small(): vocab 10 -> embed 10*16 = 160, the rest unchanged: 160 + 544 + 528 = 1,232
SMALL_PARAMS = 160 + 544 + 528


def _opts(*shape):
    return Options(inputs=InputOptions(input_shape=tuple(shape)))


def test_tied_weights_class_end_to_end():
    report = analyze(f"{TIED}:TiedWeightsModel", _opts(16))
    assert report.model.source == "python"
    assert report.model.model_class == "TiedWeightsModel"
    assert report.forward_pass.ok and report.backward_pass.ok
    assert report.params.parameters == TIED_PARAMS
    assert report.params.trainable == TIED_PARAMS
    assert report.params.tied == [["embed.weight", "head.weight"]]
    assert report.params.checkpoint is None  # nothing published to compare with
    assert report.input.shape == [1, 16]
    # up: 16 -> 32, ReLU keeps 32, down: 32 -> 16, head: 16 -> vocab 100
    rows = [(n.type, n.output_shape) for n in report.structure.nodes]
    assert rows == [("Linear", [32]), ("ReLU", [32]), ("Linear", [16]), ("Linear", [100])]
    # The embedding is never called: only its weight is used, through the head.
    assert report.structure.unused_modules == ["embed"]


def test_function_factory_and_batch():
    report = analyze(f"{TIED}:make_small", Options(inputs=InputOptions(batch=4, input_shape=(16,))))
    assert report.forward_pass.ok
    assert report.params.parameters == SMALL_PARAMS
    assert report.input.shape == [4, 16]
    assert report.structure.nodes[-1].output_shape == [10]  # vocab 10


def test_built_on_meta_no_storage():
    from neurarch.build import build

    built = build(resolve(f"{TIED}:TiedWeightsModel"))
    assert {p.device.type for p in built.model.parameters()} == {"meta"}


def test_sibling_import_and_sys_path_restored():
    path_before = list(sys.path)
    # Block(8): Linear(8, 8) = 8*8 + 8 = 72 parameters
    report = analyze(f"python:{MODELS / 'uses_sibling.py'}:build", _opts(8))
    assert report.params.parameters == 72
    assert sys.path == path_before


def test_unique_module_name():
    resolve(f"{TIED}:TiedWeightsModel")
    assert "tied_mlp" not in sys.modules  # never under the generic file name
    assert any(k.startswith("neurarch_user_tied_mlp_") for k in sys.modules)


def test_needs_input_shape():
    with pytest.raises(InputError, match="--input-shape"):
        analyze(f"{TIED}:TiedWeightsModel")


def test_missing_file():
    with pytest.raises(SourceNotFoundError, match="no such file"):
        resolve(f"python:{MODELS / 'nope.py'}:Net")


def test_no_factory_named():
    with pytest.raises(SourceNotFoundError, match="no factory named"):
        resolve(f"python:{MODELS / 'tied_mlp.py'}")


def test_missing_factory_suggests_close_name():
    with pytest.raises(SourceNotFoundError, match=r"has no 'TiedWeightModel'.*did you mean TiedWeightsModel"):
        resolve(f"{TIED}:TiedWeightModel")


def test_factory_needs_arguments():
    with pytest.raises(SourceNotFoundError, match=r"needs arguments \(width\)"):
        resolve(f"{TIED}:needs_args")


def test_not_callable_and_instance():
    with pytest.raises(SourceNotFoundError, match="is a int, not a class or function"):
        resolve(f"{TIED}:WIDTH")
    with pytest.raises(SourceNotFoundError, match="module instance"):
        resolve(f"{TIED}:INSTANCE")


def test_factory_raising():
    with pytest.raises(BuildError, match="ValueError: width must be even"):
        analyze(f"{TIED}:raises", _opts(16))


def test_factory_returns_non_module():
    with pytest.raises(BuildError, match="returned int, not an nn.Module"):
        analyze(f"{TIED}:not_a_module", _opts(16))


def test_import_failure():
    name = f"python:{MODELS / 'broken_import.py'}:Net"
    with pytest.raises(BuildError, match=r"RuntimeError: this file fails on import \(at broken_import.py:3\)") as info:
        resolve(name)
    assert isinstance(info.value, NeurarchError)
    assert not any(k.startswith("neurarch_user_broken_import_") for k in sys.modules)


def test_not_python(tmp_path):
    f = tmp_path / "model.txt"
    f.write_text("not python")
    with pytest.raises(SourceNotFoundError, match="cannot be imported as Python"):
        resolve(f"python:{f}:Net")
