"""Screenshots of the Quantize page with a finished quality report and chart, light and dark.

Saved in ``tests/artifacts/pages/`` (or ``$QUANTDESK_ARTIFACTS/pages``) beside the other
pages' screenshots, for a person to look at; the test checks each one was drawn.
"""

import pytest

from tests.ui.screenshot_check import take_screenshots
from tests.ui.test_real_window_xvfb import xvfb_display  # noqa: F401 (fixture)


@pytest.mark.xvfb
@pytest.mark.smollm2
@pytest.mark.slow
def test_quality_report_screenshots_light_and_dark(xvfb_display, smollm2_gguf):  # noqa: F811
    take_screenshots(xvfb_display, "tests.ui.pages.quality_screenshots", [],
                     ["quantize-quality-types", "quantize-quality"], timeout=900)
