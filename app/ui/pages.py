"""The four places of the app: Chat, Models, Quantize, Settings.

Each page is its own widget so that later work (the chat view, the model library and
Hub search, the drop-to-quantize panel, settings) replaces one class without touching
the window.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget


class Page(QWidget):
    """A titled page with a one-line description of what it is for."""

    title = ""
    summary = ""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(f"page-{self.title.lower()}")
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
        layout.addWidget(heading)
        layout.addWidget(body)
        layout.addStretch(1)
        body.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)


class ChatPage(Page):
    title = "Chat"
    summary = "Talk to a model running on this computer. Conversations are kept on disk."


class ModelsPage(Page):
    title = "Models"
    summary = "Search the Hugging Face Hub, download models, and see what is on this computer."


class QuantizePage(Page):
    title = "Quantize"
    summary = ("Drop a safetensors folder or a GGUF file here to convert it and quantize it "
               "(F16, BF16, Q8_0, Q4_K_M and the other llama.cpp types).")


class SettingsPage(Page):
    title = "Settings"
    summary = "Folders, GPU offload, threads and context defaults."


PAGES: tuple[type[Page], ...] = (ChatPage, ModelsPage, QuantizePage, SettingsPage)
