"""The Qt-free packages import, module by module, with PySide6 made unimportable."""

import subprocess
import sys

from tests.conftest import REPO_ROOT

BLOCK_QT_AND_IMPORT_ALL = r"""
import importlib, pkgutil, sys

class BlockQt:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("PySide6", "shiboken6", "PyQt5", "PyQt6"):
            raise ImportError(f"{name} is blocked in this test")
        return None

sys.meta_path.insert(0, BlockQt())
import quantize, models, app.core  # the one-line check
imported = []
for package in (quantize, models, app.core):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(info.name)
        imported.append(info.name)
assert not [m for m in sys.modules if m.startswith(("PySide6", "shiboken6"))]
print(len(imported), " ".join(sorted(imported)))
"""


def test_core_packages_import_without_qt():
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_QT_AND_IMPORT_ALL],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    count, names = result.stdout.split(" ", 1)
    assert "models.foundation.jobs" in names and "models.hardware" in names
    assert int(count) >= 6


def test_blocking_really_blocks_qt():
    """Guard against the test above passing because the blocker does nothing."""
    code = BLOCK_QT_AND_IMPORT_ALL.split("import quantize")[0] + "import app.ui.main_window\n"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "blocked in this test" in result.stderr
