"""Light and dark themes: explicit palettes, the style sheet filled per scheme."""

from PySide6.QtGui import QPalette

from app.ui.application import create_application
from app.ui.theme import COLORS, apply_theme, current_scheme


def test_light_and_dark_palettes_and_style_sheet(qtbot):
    app = create_application()
    try:
        assert apply_theme("dark", app) == "dark"
        assert current_scheme() == "dark"
        assert app.palette().color(QPalette.ColorRole.Window).lightness() < 80
        assert COLORS["dark"]["sidebar"] in app.styleSheet()
        assert "$" not in app.styleSheet()  # every placeholder filled
        assert apply_theme("light", app) == "light"
        assert app.palette().color(QPalette.ColorRole.Window).lightness() > 200
        assert COLORS["light"]["sidebar"] in app.styleSheet()
        assert apply_theme("system", app) in ("light", "dark")
        assert apply_theme("nonsense", app) in ("light", "dark")  # an unknown value: system
    finally:
        apply_theme("light", app)
