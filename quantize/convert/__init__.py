"""Hugging Face safetensors checkpoints → GGUF (F32/F16/BF16), faithful and memory-bounded.

- :func:`open_hf_folder` exposes a checkpoint as a :class:`~quantize.source.TensorSource`
  (the quantizer consumes it directly: "HF folder → Q4_K_M" needs no intermediate file).
- :func:`convert` writes an F32/F16/BF16 GGUF through :func:`quantize.gguf_output.write_gguf`.

Modules: ``safetensors_reader`` (validated lazy reads), ``hf_folder`` (files of a
checkpoint), ``archs/`` (one declarative module per family), ``tensor_checks``,
``vocab``/``pretokenizer``/``special_tokens`` (tokenizer export), ``hf_source``,
``convert``.
"""

from quantize.convert.convert import OUTTYPES, convert, default_output_path, output_type
from quantize.convert.hf_source import HFSource, open_hf_folder

__all__ = ["HFSource", "OUTTYPES", "convert", "default_output_path", "open_hf_folder", "output_type"]
