"""Copies of a real GGUF with changed header keys, for tests that need a model to behave as
another family does (a thinking template, an embedding model's pooling) — made with
gguf-py's own ``gguf_new_metadata`` copier, tensors unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

# A Qwen3-style thinking switch (``enable_thinking``, on by default) on SmolLM2's ChatML.
# With thinking on the generation prompt opens ``<think>`` (as DeepSeek-R1's does), so the
# reply starts inside its reasoning; off, it holds an empty closed section, as Qwen3's does.
THINKING_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- else %}{{- '<think>\\n' }}{%- endif %}"
    "{%- endif %}"
)


def copy_gguf(source: Path, target: Path, values: Optional[dict[str, tuple[Any, Any]]] = None,
              chat_template: Optional[str] = None) -> Path:
    """Write ``target``: ``source`` with ``values`` (key -> (GGUFValueType, value)) set and,
    when given, a new chat template. Kept when it exists already (a cache)."""
    import gguf
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

    if target.exists():
        return target
    reader = gguf.GGUFReader(str(source))
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    new = {key: MetadataDetails(kind, value) for key, (kind, value) in (values or {}).items()}
    if chat_template is not None:
        new[gguf.Keys.Tokenizer.CHAT_TEMPLATE] = MetadataDetails(gguf.GGUFValueType.STRING,
                                                                 chat_template)
    partial = target.with_suffix(".partial")
    writer = gguf.GGUFWriter(str(partial), arch=arch, endianess=reader.endianess)
    alignment = reader.fields.get(gguf.Keys.General.ALIGNMENT)
    if alignment is not None:
        writer.data_alignment = alignment.contents()
    copy_with_new_metadata(reader, writer, new, [])
    partial.rename(target)
    return target
