"""Widgets shared by several pages (banners, ...)."""
