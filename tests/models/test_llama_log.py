"""llama.cpp's log in this process: one callback for the whole process, so a capture must
hand it back when closed, or llama.cpp's next line calls into freed memory."""

from __future__ import annotations

import gc

import pytest

from models.engine.llama_log import LlamaLogCapture

pytestmark = pytest.mark.smollm2


def test_a_closed_capture_hands_llama_cpps_log_back(smollm2_gguf):
    import llama_cpp

    def load() -> None:
        llama_cpp.Llama(model_path=str(smollm2_gguf), vocab_only=True, verbose=False)

    capture = LlamaLogCapture()
    start = capture.mark()
    load()
    assert any("llama" in line for line in capture.lines_since(start))
    capture.close()
    closed = capture.mark()
    load()
    assert capture.mark() == closed  # the lines went to what was there before
    del capture
    gc.collect()
    load()  # with the dropped capture still installed, this would crash the process
