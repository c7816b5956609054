"""Screenshots of the Server page on a real (Xvfb) display, light and dark, off and serving.

Saved in ``tests/artifacts/pages/`` (or ``$QUANTDESK_ARTIFACTS/pages``) beside the other
pages' for a person to look at; the test checks each one was drawn.
"""

import pytest

from tests.ui.screenshot_check import take_screenshots
from tests.ui.test_real_window_xvfb import xvfb_display  # noqa: F401 (fixture)


@pytest.mark.xvfb
@pytest.mark.smollm2
def test_server_page_screenshots_light_and_dark(xvfb_display, smollm2_gguf):  # noqa: F811
    take_screenshots(xvfb_display, "tests.ui.server.screenshots", [str(smollm2_gguf)],
                     ["server-off", "server-on"], timeout=300)
