"""The About box says how QuantDesk was installed (source checkout here; .deb, portable...
in a bundle: tests/core/test_install_info_and_system_programs.py covers those words)."""

from app.core.install_info import install_info
from app.ui.about import about_text


def test_about_text_says_where_quantdesk_runs_from():
    install_info.cache_clear()
    assert "Installed as: source checkout" in about_text()
