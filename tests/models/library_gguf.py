"""Small real GGUF files for library and CLI tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFWriter


def write_gguf(path: Path, name: str = "tiny", n_ctx: int = 256, file_type: int = 7,
               template: bool = True, shard: tuple[int, int] = (1, 1), rows: int = 4) -> Path:
    """A small real GGUF file (llama metadata, a couple of F32 tensors)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_context_length(n_ctx)
    writer.add_block_count(1)
    writer.add_file_type(file_type)
    if shard != (1, 1):
        writer.add_uint16("split.no", shard[0] - 1)
        writer.add_uint16("split.count", shard[1])
    if template:
        writer.add_chat_template("{{ messages }}")
    writer.add_tensor("token_embd.weight", np.ones((rows, 8), dtype=np.float32))
    writer.add_tensor("blk.0.attn_q.weight", np.ones((8, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
