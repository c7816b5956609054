"""The Settings page: folders, the Hub token and endpoint, theme, default load settings."""
