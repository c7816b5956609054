"""Light and dark themes: follow the system, or the person's choice in Settings.

Qt 6.5+ reports the system's colour scheme (``QStyleHints.colorScheme``) and signals its
changes. The app uses the Fusion style with an explicit palette for each scheme, so the
look is the same on every platform and under Xvfb (where no platform theme exists), and
the style sheet (``assets/styles/quantdesk.qss``) takes its few accent colours from
:data:`COLORS` through ``$name`` placeholders. Widgets colour themselves with palette
roles, never with light-only constants, so both schemes read well.
"""

from __future__ import annotations

from string import Template

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

from assets import style_sheet

MODES = ("system", "light", "dark")

#: Colours the style sheet names, per scheme.
COLORS: dict[str, dict[str, str]] = {
    "light": {
        "accent": "#5f3dc4", "accent_soft": "#e5dbff", "sidebar": "#f3f0ff",
        "sidebar_border": "#d0bfff", "text": "#212529", "text_muted": "#495057",
        "error_bg": "#fff0f0", "error_border": "#e03131", "warning_bg": "#fff9db",
        "warning_border": "#f08c00", "info_bg": "#e7f5ff", "info_border": "#1c7ed6",
        "ok": "#2b8a3e", "bad": "#c92a2a", "tight": "#e67700",
        "scroll_handle": "#ced4da", "scroll_handle_hover": "#adb5bd",
    },
    "dark": {
        "accent": "#9775fa", "accent_soft": "#3b2f63", "sidebar": "#1e1b2e",
        "sidebar_border": "#3b2f63", "text": "#e9ecef", "text_muted": "#adb5bd",
        "error_bg": "#3d1f1f", "error_border": "#ff6b6b", "warning_bg": "#3d341a",
        "warning_border": "#fcc419", "info_bg": "#1a2e40", "info_border": "#4dabf7",
        "ok": "#69db7c", "bad": "#ff8787", "tight": "#ffc078",
        "scroll_handle": "#4a4d55", "scroll_handle_hover": "#6c717a",
    },
}

_current = {"mode": "system", "scheme": "light", "connected": False}


def system_scheme() -> str:
    """``"dark"`` when the system asks for dark, else ``"light"``."""
    hints = QGuiApplication.styleHints()
    return "dark" if hints.colorScheme() == Qt.ColorScheme.Dark else "light"


def current_scheme() -> str:
    """The scheme on screen: ``"light"`` or ``"dark"``."""
    return _current["scheme"]


def color(name: str) -> str:
    """A named colour of the scheme on screen (``"ok"``, ``"bad"``, ``"accent"`` ...)."""
    return COLORS[current_scheme()][name]


def _palette(scheme: str) -> QPalette:
    if scheme == "light":
        palette = QPalette(QColor("#f8f9fa"))
        palette.setColor(QPalette.ColorRole.Base, QColor("#ffffff"))
        palette.setColor(QPalette.ColorRole.AlternateBase, QColor("#f1f3f5"))
    else:
        palette = QPalette(QColor("#25262b"))
        palette.setColor(QPalette.ColorRole.Window, QColor("#1f2024"))
        palette.setColor(QPalette.ColorRole.Base, QColor("#16171b"))
        palette.setColor(QPalette.ColorRole.AlternateBase, QColor("#202127"))
        palette.setColor(QPalette.ColorRole.Text, QColor("#e9ecef"))
        palette.setColor(QPalette.ColorRole.WindowText, QColor("#e9ecef"))
        palette.setColor(QPalette.ColorRole.ButtonText, QColor("#e9ecef"))
        palette.setColor(QPalette.ColorRole.ToolTipBase, QColor("#2c2e33"))
        palette.setColor(QPalette.ColorRole.ToolTipText, QColor("#e9ecef"))
        palette.setColor(QPalette.ColorRole.PlaceholderText, QColor("#868e96"))
        palette.setColor(QPalette.ColorRole.Link, QColor("#74c0fc"))
        # setColor above set every group, the disabled one too: grey it, or a disabled
        # button looks as clickable as an enabled one.
        for role in (QPalette.ColorRole.Text, QPalette.ColorRole.WindowText, QPalette.ColorRole.ButtonText):
            palette.setColor(QPalette.ColorGroup.Disabled, role, QColor("#6c717a"))
    colors = COLORS[scheme]
    palette.setColor(QPalette.ColorRole.Highlight, QColor(colors["accent"]))
    palette.setColor(QPalette.ColorRole.HighlightedText, QColor("#ffffff"))
    palette.setColor(QPalette.ColorRole.Accent, QColor(colors["accent"]))
    return palette


def apply_theme(mode: str = "system", app: QApplication | None = None) -> str:
    """Apply ``mode`` (``system`` / ``light`` / ``dark``) and return the scheme shown.

    With ``system`` the app follows later changes of the system scheme too.
    """
    if mode not in MODES:
        mode = "system"
    app = app or QApplication.instance()  # type: ignore[assignment]
    scheme = system_scheme() if mode == "system" else mode
    _current.update(mode=mode, scheme=scheme)
    app.setStyle("Fusion")
    app.setPalette(_palette(scheme))
    app.setStyleSheet(Template(style_sheet()).safe_substitute(COLORS[scheme]))
    if not _current["connected"]:
        QGuiApplication.styleHints().colorSchemeChanged.connect(_system_scheme_changed)
        _current["connected"] = True
    return scheme


def _system_scheme_changed(_scheme: Qt.ColorScheme) -> None:
    if _current["mode"] == "system":
        apply_theme("system")
