"""The import rule of docs/architecture.md: data flows one way, nothing imports from a later stage.

Every ``import`` in ``src/neurarch`` (at module level or inside a function,
under ``TYPE_CHECKING`` too) is read from the source with ``ast`` and checked
against the stage table below.  A module may import its own stage and the
stages before it; the report contract and the options import no stage; the
renderers read nothing but the report.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "neurarch"

# (module prefix, stage rank); the longest matching prefix wins.  Same table as docs/architecture.md.
STAGES = {
    # read by every stage: errors, the options, bounds, the report contract, shared helpers and data
    "neurarch": 0,
    "neurarch._lazy": 0,
    "neurarch.errors": 0,
    "neurarch.limits": 0,
    "neurarch.options": 0,
    "neurarch.report": 0,
    "neurarch.introspect": 0,
    "neurarch.supervise": 0,
    "neurarch.jobs": 0,
    "neurarch.cards": 0,
    "neurarch.data": 0,
    "neurarch.catalog": 0,
    # the pipeline, in order
    "neurarch.sources": 1,
    "neurarch.build": 2,
    "neurarch.inputs": 3,
    "neurarch.fake": 4,
    "neurarch.trace": 4,
    "neurarch.plan": 5,
    "neurarch.cost": 6,
    "neurarch.verify": 6,
    "neurarch.pipeline": 7,
    "neurarch.warm": 7,
    "neurarch.estimate_check": 7,
    "neurarch.render": 8,
    "neurarch.store": 8,
    "neurarch.changes": 9,
    "neurarch.sweep": 9,
    # faces
    "neurarch.web": 10,
    "neurarch.cli": 10,
    "neurarch.changes.cli": 10,
    "neurarch.sweep.cli": 10,
    "neurarch.sweep.__main__": 10,
}
# Stages that may import only these (besides themselves), whatever their rank.
ONLY = {
    "neurarch.report": {"neurarch.report"},
    "neurarch.options": {"neurarch.errors", "neurarch.limits"},
    "neurarch.render": {"neurarch.report", "neurarch.options", "neurarch.errors"},
}


def _stage(module: str) -> str:
    best = "neurarch"
    for prefix in STAGES:
        if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
            best = prefix
    return best


def _module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path, src: Path) -> list[tuple[int, str]]:
    """Every neurarch module ``path`` imports, with its line."""
    name = _module_name(path, src)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "neurarch"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "neurarch":
                continue
            if node.module is None or (node.level and not node.module):
                # `from . import x`: each name is a module (or a name in the package itself)
                out += [(node.lineno, f"{target}.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, target))
    return out


def _resolve(target: str, src: Path) -> str:
    """``neurarch.plan.train.setup.TrainSetup`` -> the module that exists: ``neurarch.plan.train.setup``."""
    parts = target.split(".")
    while len(parts) > 1:
        rel = Path(*parts[1:])
        if (src / rel).with_suffix(".py").exists() or (src / rel / "__init__.py").exists():
            return ".".join(parts)
        parts = parts[:-1]
    return "neurarch"


def violations(src: Path = SRC) -> list[str]:
    found = []
    for path in sorted(src.rglob("*.py")):
        here = _module_name(path, src)
        stage = _stage(here)
        for line, target in _imports(path, src):
            target = _resolve(target, src)
            there = _stage(target)
            if there == stage:
                continue
            allowed = ONLY.get(stage)
            if allowed is not None:
                ok = there in allowed
            else:
                ok = STAGES[there] <= STAGES[stage]
            if not ok:
                found.append(f"{path.relative_to(src.parent)}:{line}: {here} ({stage}, stage {STAGES[stage]}) imports {target} ({there}, stage {STAGES[there]})")
    return found


def test_every_package_has_a_stage():
    top = {p.stem if p.is_file() else p.name for p in SRC.iterdir() if (p.is_file() and p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").exists()}
    missing = sorted(t for t in top if f"neurarch.{t}" not in STAGES)
    assert not missing, f"modules with no stage in the table (add them to STAGES and docs/architecture.md): {missing}"


def test_nothing_imports_from_a_later_stage():
    found = violations()
    assert not found, "imports against the one-way rule:\n" + "\n".join(found)


def test_the_rule_can_fail(tmp_path):
    """The checker sees a renderer that reaches into the pipeline (the rule is not vacuous)."""
    fake = tmp_path / "neurarch"
    (fake / "render").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "pipeline.py").write_text("")
    (fake / "render" / "__init__.py").write_text("def f():\n    from ..pipeline import analyze\n")
    found = violations(fake)
    assert len(found) == 1 and "neurarch.render" in found[0] and "neurarch.pipeline" in found[0], found


@pytest.mark.parametrize("module", ["neurarch.options", "neurarch.report", "neurarch.cli", "neurarch.cli.checks", "neurarch.cli.catalog"])
def test_light_modules_do_not_import_torch(module):
    """Options, the report contract and the CLI's own commands load without torch (--help, checks and bad flags are instant)."""
    import subprocess
    import sys

    code = f"import sys, {module}; sys.exit(1 if 'torch' in sys.modules or 'transformers' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0, f"{module} imports torch or transformers"
