"""``python:FILE.py:Factory`` — a model defined in the user's own Python file.

The spec names a local file and, after the last colon, a class or function
in it that takes no required arguments and returns an ``nn.Module``::

    neurarch-trace python:models/tied_mlp.py:TiedWeightsModel --input-shape 64

This is the user's own code on their own machine, so we import it (like
``python FILE.py`` would); ``trust_remote_code`` is about code downloaded
from a model repo and does not apply here.  What we take care of:

* the file is imported under a unique module name
  (``neurarch_user_<stem>_<hash of path>``), never a generic one, so it
  cannot shadow or be shadowed by another module in ``sys.modules``;
* the file's folder is on ``sys.path`` while the file is imported and while
  the factory runs, so ``from my_layers import Block`` beside it works;
* every problem (missing file, import failure, missing or unusable factory)
  is one clear :class:`~neurarch.errors.NeurarchError` line.

The factory is *called* later, by :func:`neurarch.build.build`, under
``torch.device("meta")``; that is where a factory that raises or returns
something other than an ``nn.Module`` is reported (as a ``BuildError``).
No checkpoint is read: the report's checkpoint count is ``None``.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import importlib.util
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from torch import nn

from ..errors import BuildError, SourceNotFoundError
from .base import ModelSource

PREFIX = "python:"
USAGE = "expected python:FILE.py:Factory, e.g. python:models/net.py:Net"


def parse(spec: str) -> tuple[Path, str]:
    """Split ``python:FILE.py:Factory`` into the file path and the factory name.

    The factory is what follows the *last* colon, so a Windows path
    (``python:C:\\models\\net.py:Net``) still parses.
    """
    rest = spec[len(PREFIX) :] if spec.startswith(PREFIX) else spec
    file_part, sep, name = rest.rpartition(":")
    if not sep or not file_part or not name:
        raise SourceNotFoundError(spec, f"no factory named; {USAGE}")
    if not name.isidentifier():
        raise SourceNotFoundError(spec, f"{name!r} is not a Python name; {USAGE}")
    return Path(file_part).expanduser(), name


def _module_name(path: Path) -> str:
    """A module name unique to this file, so it never collides with a real module."""
    stem = re.sub(r"\W", "_", path.stem)
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    return f"neurarch_user_{stem}_{digest}"


@contextlib.contextmanager
def _folder_on_path(folder: Path):
    """Put ``folder`` first on ``sys.path`` for the duration of the block."""
    entry = str(folder)
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        try:
            sys.path.remove(entry)
        except ValueError:  # the user's code removed it itself
            pass


def import_file(path: Path, spec: str) -> ModuleType:
    """Import ``path`` as a fresh module; raise a NeurarchError if that fails."""
    name = _module_name(path)
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise SourceNotFoundError(spec, f"{path} cannot be imported as Python (is it a .py file?)")
    module = importlib.util.module_from_spec(module_spec)
    # Registered while it runs (dataclasses and pickling look the module up
    # by name), under the unique name; a failed import leaves no trace.
    sys.modules[name] = module
    try:
        with _folder_on_path(path.parent):
            module_spec.loader.exec_module(module)
    except KeyboardInterrupt:
        sys.modules.pop(name, None)
        raise
    except BaseException as e:  # SystemExit too: a file that calls sys.exit() on import
        sys.modules.pop(name, None)
        where = _user_line(e, path)
        raise BuildError(f"{spec}: importing {path} raised {type(e).__name__}: {e}{where}") from None
    return module


def _user_line(e: BaseException, path: Path) -> str:
    """' (at FILE:LINE)' for the innermost traceback frame in the user's file."""
    if isinstance(e, SyntaxError) and e.lineno:
        return ""  # the message already names the line
    line = None
    tb = e.__traceback__
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename) == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" (at {path.name}:{line})" if line else ""


def _candidates(module: ModuleType) -> list[str]:
    """Names defined in the file that could be factories: classes and functions."""
    out = []
    for key, value in vars(module).items():
        if key.startswith("_") or getattr(value, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(value) or inspect.isfunction(value):
            out.append(key)
    return out


def _required_args(factory: Callable[..., Any]) -> list[str]:
    """Parameters the factory needs that have no default (``self`` excluded)."""
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):  # builtins, some C extensions: we cannot tell
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in sig.parameters.values() if p.kind in kinds and p.default is inspect.Parameter.empty]


def find_factory(module: ModuleType, name: str, path: Path, spec: str) -> Callable[[], Any]:
    """The class or function ``name`` in the imported file, checked for use."""
    if not hasattr(module, name):
        defined = _candidates(module)
        close = difflib.get_close_matches(name, defined, n=3, cutoff=0.5)
        if close:
            hint = f"; did you mean {', '.join(close)}?"
        elif defined:
            hint = f"; it defines {', '.join(sorted(defined)[:8])}"
        else:
            hint = "; it defines no classes or functions"
        raise SourceNotFoundError(spec, f"{path} has no {name!r}{hint}")
    factory = getattr(module, name)
    if isinstance(factory, nn.Module):
        raise SourceNotFoundError(spec, f"{name} in {path} is a module instance; name the class or a function that builds it (it is rebuilt on the meta device)")
    if not callable(factory):
        raise SourceNotFoundError(spec, f"{name} in {path} is a {type(factory).__name__}, not a class or function")
    required = _required_args(factory)
    if required:
        raise SourceNotFoundError(spec, f"{name} needs arguments ({', '.join(required)}); point at a function that takes none and returns the model")
    return factory


def load(spec: str, *, trust_remote_code: bool = False) -> ModelSource:
    """Resolve ``python:FILE.py:Factory`` to a source whose factory builds the model.

    ``trust_remote_code`` is accepted for a uniform signature and ignored:
    the file is the user's own local code, not code from a model repo.
    """
    del trust_remote_code
    file_path, name = parse(spec)
    path = file_path.resolve()
    if not path.exists():
        raise SourceNotFoundError(spec, f"no such file {file_path}")
    if not path.is_file():
        raise SourceNotFoundError(spec, f"{file_path} is not a file")
    module = import_file(path, spec)
    factory = find_factory(module, name, path, spec)

    def build_model():
        # Called by build.build() under torch.device("meta"); the folder is on
        # sys.path again in case the factory imports a sibling file lazily.
        with _folder_on_path(path.parent):
            return factory()

    kind = "class" if inspect.isclass(factory) else "function"
    return ModelSource(
        id=spec,
        kind="python",
        provenance=f"user code: {kind} {name} in {path}",
        factory=build_model,
        notes=[f"built by calling {name}() from {file_path} on the meta device"],
    )
