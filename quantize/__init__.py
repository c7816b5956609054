"""Turning model files into GGUF files: convert, quantize, measure. Qt-free."""
