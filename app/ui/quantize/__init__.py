"""The Quantize page: convert and quantize a model dropped on the window."""
