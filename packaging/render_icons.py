"""Render ``assets/icons/quantdesk.svg`` into the icon files Windows and macOS want.

Run by ``build.py`` with the build environment's Python (it has PySide6, whose QtSvg
renders the SVG, and Pillow, which writes ``.ico`` and ``.icns``):

    build/venv/bin/python packaging/render_icons.py build/icons

Linux needs none of this: the menu entry uses the SVG itself (hicolor/scalable).
"""

import sys
from pathlib import Path

from PIL import Image
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

SVG = Path(__file__).resolve().parent.parent / "assets" / "icons" / "quantdesk.svg"


def render(size: int, out: Path) -> None:
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    QSvgRenderer(str(SVG)).render(painter)
    painter.end()
    image.save(str(out))


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    app = QGuiApplication(["render_icons", "-platform", "offscreen"])  # noqa: F841
    big = out / "quantdesk-1024.png"
    render(1024, big)
    image = Image.open(big)
    image.save(out / "quantdesk.ico", sizes=[(s, s) for s in (16, 24, 32, 48, 64, 128, 256)])
    image.save(out / "quantdesk.icns")
    print(f"icons written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
