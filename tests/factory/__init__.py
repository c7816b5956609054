"""Factories that write tiny but real-format model files for tests."""
