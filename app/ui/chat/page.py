"""The Chat page (placeholder until the chat window lands)."""

from __future__ import annotations

from pathlib import Path

from app.ui.pages import PlaceholderPage


class ChatPage(PlaceholderPage):
    title = "Chat"
    summary = "Talk to a model running on this computer. Conversations are kept on disk."

    def open_path(self, path: Path) -> None:
        """Remember the model the window was asked to open (the chat window loads it)."""
        self.model_path = Path(path)
