"""The Models page (placeholder until the Hub, downloads and Library views land)."""

from __future__ import annotations

from app.ui.pages import PlaceholderPage


class ModelsPage(PlaceholderPage):
    title = "Models"
    summary = "Search the Hugging Face Hub, download models, and see what is on this computer."
