"""The Quantize page (placeholder until the quantize view lands)."""

from __future__ import annotations

from pathlib import Path

from app.ui.pages import PlaceholderPage


class QuantizePage(PlaceholderPage):
    title = "Quantize"
    summary = ("Drop a safetensors folder or a GGUF file here to convert it and quantize it "
               "(F16, BF16, Q8_0, Q4_K_M and the other llama.cpp types).")

    def open_path(self, path: Path) -> None:
        """Remember the input the window was asked to open (the quantize view shows it)."""
        self.input_path = Path(path)
