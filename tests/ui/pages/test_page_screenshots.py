"""Screenshots of the Models, Quantize and Settings pages on a real (Xvfb) display, light and dark.

Saved in ``tests/artifacts/pages/`` (or ``$QUANTDESK_ARTIFACTS/pages``) for a person to
look at; the test checks each one was drawn (many colours, the window's size).
"""

import pytest

from tests.ui.screenshot_check import take_screenshots
from tests.ui.test_real_window_xvfb import xvfb_display  # noqa: F401 (fixture)

STATES = ["library", "hub-details", "downloads", "quantize-sizes", "quantize-progress", "settings",
          "settings-bottom"]


@pytest.mark.xvfb
def test_page_screenshots_light_and_dark(xvfb_display):  # noqa: F811
    take_screenshots(xvfb_display, "tests.ui.pages.screenshots", [], STATES, timeout=240)
