"""The places of the app — Chat, Models, Quantize, Server, Settings — and their base class.

Each page lives in its own folder (``app/ui/chat/``, ``app/ui/models/``,
``app/ui/quantize/``, ``app/ui/server/``, ``app/ui/settings/``) so that work on one page never touches the
window or another page. The window talks to a page only through :class:`Page`'s hooks.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from models.foundation.errors import QuantDeskError


class Page(QWidget):
    """A place in the window. Subclasses set :attr:`title` and override the hooks they need.

    Hooks the window calls:
        open_path(path): the window's one "open this path" entry routed ``path`` here
            (see :mod:`app.core.open_path`).
        on_shown(): the page became the one on screen.
        shutdown(): the window is closing; stop workers, leave nothing half-done.
    """

    title = ""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(f"page-{self.title.lower()}")

    def open_path(self, path: Path) -> None:
        """Open ``path`` on this page; pages that take no paths refuse with a sentence."""
        raise QuantDeskError(f"The {self.title} page does not open files such as {Path(path).name}.")

    def on_shown(self) -> None:
        """Called each time the page comes on screen."""

    def shutdown(self) -> None:
        """Called once when the window closes."""


class PlaceholderPage(Page):
    """A titled page with a one-line description, for a place not built yet."""

    summary = ""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(32, 28, 32, 28)
        heading = QLabel(self.title)
        heading.setObjectName("pageTitle")
        font = heading.font()
        font.setPointSize(font.pointSize() + 8)
        font.setBold(True)
        heading.setFont(font)
        body = QLabel(self.summary)
        body.setWordWrap(True)
        body.setObjectName("pageSummary")
        body.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        layout.addWidget(heading)
        layout.addWidget(body)
        layout.addStretch(1)


def page_classes() -> tuple[type[Page], ...]:
    """The pages in sidebar order (imported here, after :class:`Page` exists)."""
    from app.ui.chat.page import ChatPage
    from app.ui.models.page import ModelsPage
    from app.ui.quantize.page import QuantizePage
    from app.ui.server.page import ServerPage
    from app.ui.settings.page import SettingsPage

    return (ChatPage, ModelsPage, QuantizePage, ServerPage, SettingsPage)
