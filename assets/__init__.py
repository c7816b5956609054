"""Icons and style sheets shipped with QuantDesk, located relative to this package."""

from pathlib import Path

ASSETS_DIR = Path(__file__).resolve().parent


def icon_path(name: str = "quantdesk") -> Path:
    """Path of an icon in ``assets/icons``: the PNG when present, else the SVG."""
    png = ASSETS_DIR / "icons" / f"{name}.png"
    return png if png.exists() else ASSETS_DIR / "icons" / f"{name}.svg"


def style_sheet() -> str:
    """The application's Qt style sheet (``assets/styles/quantdesk.qss``)."""
    return (ASSETS_DIR / "styles" / "quantdesk.qss").read_text(encoding="utf-8")
