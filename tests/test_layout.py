"""The architecture holds: imports flow cli -> analysis, importers -> model -> engine,
errors is a leaf, only the CLI imports click and rich, and only the torch importer
imports torch. Read from the source with ast."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gradflow"
LAYERS = ["errors", "engine", "model", "analysis", "importers", "cli"]   # each may import those before it
SIBLINGS = {("importers", "analysis")}   # ...except these: the two middle layers never import each other
THIRD_PARTY_ONLY_IN_CLI = {"click", "rich"}
TORCH_PACKAGE = ("importers", "torch")   # the only package that imports torch


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "gradflow":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "top"


def imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return found


SOURCES = sorted(p for p in PACKAGE.rglob("*.py"))


def violations(path: Path, package: Path = PACKAGE) -> list[str]:
    """Imports of one module that break the layering, as readable lines."""
    parts = path.relative_to(package).with_suffix("").parts
    own = layer_of("gradflow." + ".".join(parts))
    found = []
    for module in imports(path):
        if module.split(".")[0] in THIRD_PARTY_ONLY_IN_CLI and own != "cli":
            found.append(f"{path.name} imports {module}")
        if module.split(".")[0] == "torch" and parts[:2] != TORCH_PACKAGE:
            found.append(f"{path.name} imports {module}")
        target = layer_of(module)
        if target is None or own == "top" or (target == "top" and own == "cli"):
            continue
        if target == "top" or LAYERS.index(target) > LAYERS.index(own) or (own, target) in SIBLINGS:
            found.append(f"{path.name} ({own}) imports {module}")
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_layout_imports_flow_one_way(path):
    assert violations(path) == []


def test_layout_check_catches_an_upward_import_and_rich_outside_the_cli(tmp_path):
    bad = tmp_path / "engine" / "bad.py"
    bad.parent.mkdir()
    bad.write_text("import rich\nfrom gradflow.model.load import load_spec\nimport numpy\n")
    assert violations(bad, tmp_path) == ["bad.py imports rich",
                                         "bad.py (engine) imports gradflow.model.load"]


def test_layout_check_catches_torch_outside_the_importer_and_importers_using_analysis(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "importers" / "torch").mkdir(parents=True)
    outside = tmp_path / "model" / "bad.py"
    outside.write_text("import torch.nn\n")
    sibling = tmp_path / "importers" / "bad.py"
    sibling.write_text("from gradflow.analysis.flow import Graph\nimport torch\n")
    inside = tmp_path / "importers" / "torch" / "ok.py"
    inside.write_text("import torch\nfrom gradflow.model.spec import Place\n")
    assert violations(outside, tmp_path) == ["bad.py imports torch.nn"]
    assert violations(sibling, tmp_path) == ["bad.py (importers) imports gradflow.analysis.flow",
                                             "bad.py imports torch"]
    assert violations(inside, tmp_path) == []


def test_layout_every_module_has_a_docstring():
    missing = [str(p.relative_to(PACKAGE)) for p in SOURCES
               if p.stat().st_size and ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))) is None]
    assert missing == []


def test_layout_cli_starts_without_numpy_or_yaml():
    import subprocess
    import sys
    code = "import sys, gradflow.cli.main; print(sorted({'numpy', 'yaml'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_dataclass_has_a_docstring(path):
    """Without one, @dataclass builds the class's signature to write one, at every start-up."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bare = [node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
            and any("dataclass" in ast.unparse(d) for d in node.decorator_list) and ast.get_docstring(node) is None]
    assert not bare
