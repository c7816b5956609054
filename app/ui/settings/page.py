"""The Settings page (placeholder until the settings view lands)."""

from __future__ import annotations

from app.ui.pages import PlaceholderPage


class SettingsPage(PlaceholderPage):
    title = "Settings"
    summary = "Folders, GPU offload, threads and context defaults."
