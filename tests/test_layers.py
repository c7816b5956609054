"""The packages stand in layers: ``quantize`` and ``models`` never import ``app``.

Read statically from every module's source (``ast``), so an import inside a function, a
branch or a ``try`` counts as much as one at the top, and so does a module name given to
``importlib.import_module`` or ``__import__``. ``models.foundation``, which every package
stands on, imports nothing of QuantDesk outside itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO_ROOT

IMPORTERS = ("import_module", "__import__")


def imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``source`` (the module ``module``)."""
    package = module.rsplit(".", 1)[0] if "." in module else module
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module
            found.append((node.lineno, name))
        elif isinstance(node, ast.Call) and node.args:
            called = node.func.attr if isinstance(node.func, ast.Attribute) else \
                getattr(node.func, "id", None)
            first = node.args[0]
            if called in IMPORTERS and isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.append((node.lineno, first.value))
    return found


def imports_outside(package: str, allowed: tuple[str, ...]) -> list[str]:
    """``file:line module`` for each import of a QuantDesk package not in ``allowed``."""
    ours = ("app", "models", "quantize", "assets")
    wrong = []
    root = REPO_ROOT / package.replace(".", "/")
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(REPO_ROOT)
        module = ".".join(relative.with_suffix("").parts)
        for line, name in imported_modules(path.read_text(encoding="utf-8"), module):
            top = name.split(".")[0]
            inside = any(name == a or name.startswith(a + ".") for a in allowed)
            if top in ours and not inside:
                wrong.append(f"{relative}:{line} {name}")
    return wrong


def test_quantize_and_models_import_nothing_from_app():
    assert imports_outside("quantize", ("quantize", "models")) == []
    assert imports_outside("models", ("models", "quantize", "assets")) == []


def test_the_foundation_imports_only_itself():
    assert imports_outside("models.foundation", ("models.foundation",)) == []


def test_imports_inside_functions_and_by_name_are_seen():
    """Guards the tests above against passing because the reader sees nothing."""
    source = (
        "import os\n"
        "def later():\n"
        "    from app.core.preferences import Preferences\n"
        "    try:\n"
        "        import app.ui\n"
        "    except ImportError:\n"
        "        pass\n"
        "    return importlib.import_module('app.cli'), __import__('app')\n"
        "from .sibling import x\n"
        "from .. import parent\n"
    )
    found = [name for _, name in imported_modules(source, "models.hub.client")]
    assert found.count("os") == 1
    assert {"app.core.preferences", "app.ui", "app.cli", "app",
            "models.hub.sibling", "models"} <= set(found)


def test_every_package_has_modules_to_read():
    for package in ("quantize", "models", "models/foundation"):
        assert len(list(Path(REPO_ROOT, package).rglob("*.py"))) >= 5, package
