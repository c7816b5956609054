"""The base model's pass, kept small and cached per source file and text.

A quality report compares a quant with the model it was made from. The source's pass is
the same for every type quantized from it, so it runs once and is stored as a
:class:`BaseData` file in the app's cache folder (``quality-base/``), named after a
digest of the source file (path, size, modification time), the text and the settings.

What is stored (one ``.npz``, uncompressed): the tokens of the chunks used (the quant's
pass decodes the base's tokens, as llama.cpp does with its logits file), and for every
scored position a :class:`~models.quality.kld.BaseRows` record: the top ``k`` token ids
(int32) and log-probabilities (float32), ``m`` tokens drawn from the rest of the mass
(the same), the following token's log-probability and the log of the remaining mass.
That is ``8(k + m) + 16`` bytes per position: 39 MB for 100 chunks of 512 with
``k = 128, m = 64``, whatever the vocabulary (llama.cpp's file holds ``2·n_vocab`` bytes
per position: 6.5 GB for Llama 3's 128k vocabulary and the same 100 chunks).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from models.foundation.errors import QuantDeskError
from models.foundation.jobs import atomic_output
from models.quality.chunks import ChunkPlan
from models.quality.kld import BaseRows

log = logging.getLogger(__name__)

FORMAT_VERSION = 2
#: Most likely base tokens kept per position, and tokens drawn from the rest of the mass
#: (see ``kld.py``; the error is in tests/benchmarks/README.md).
DEFAULT_TOP_K = 128
DEFAULT_TAIL_SAMPLES = 64
CACHE_FOLDER = "quality-base"


@dataclass
class BaseData:
    """The base model's compact pass over a text.

    Attributes:
        plan: The chunking used.
        n_vocab: The base model's vocabulary size.
        vocab_digest: A digest of the base's token texts (the quant's must match).
        tokens: The text's tokens, ``n_chunk * n_ctx`` of them.
        rows: One record per scored position, chunk after chunk.
        top_k: Tokens kept per position.
        tail_samples: Tokens drawn from the rest of the mass per position.
        source: The base model file, as given.
    """

    plan: ChunkPlan
    n_vocab: int
    vocab_digest: str
    tokens: np.ndarray
    rows: BaseRows
    top_k: int
    tail_samples: int
    source: str

    def chunk_rows(self, chunk: int) -> BaseRows:
        """The records of chunk ``chunk``."""
        n = self.plan.scored_per_chunk
        return self.rows.rows(chunk * n, (chunk + 1) * n)

    def save(self, path: Path) -> None:
        """Write the file atomically (a cancelled or failed write leaves nothing)."""
        meta = {"version": FORMAT_VERSION, "n_ctx": self.plan.n_ctx, "n_chunk": self.plan.n_chunk,
                "n_batch": self.plan.n_batch, "n_seq": self.plan.n_seq, "n_vocab": self.n_vocab,
                "vocab_digest": self.vocab_digest, "top_k": self.top_k,
                "tail_samples": self.tail_samples, "source": self.source}
        with atomic_output(path, suffix=".npz") as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
                         tokens=self.tokens.astype(np.int32), top_ids=self.rows.top_ids,
                         top_logprobs=self.rows.top_logprobs, token_logprob=self.rows.token_logprob,
                         log_rest=self.rows.log_rest, tail_ids=self.rows.tail_ids,
                         tail_logprobs=self.rows.tail_logprobs)

    @classmethod
    def load(cls, path: Path) -> "BaseData":
        """Read a file written by :meth:`save`.

        Raises:
            QuantDeskError: it is not such a file, or was written by another version.
        """
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(bytes(z["meta"]).decode())
                if meta.get("version") != FORMAT_VERSION:
                    raise ValueError(f"format version {meta.get('version')}")
                rows = BaseRows(*(z[f] for f in ("top_ids", "top_logprobs", "token_logprob", "log_rest",
                                                 "tail_ids", "tail_logprobs")))
                tokens = z["tokens"]
        except (OSError, ValueError, KeyError) as exc:
            raise QuantDeskError(f"The stored base-model pass {path} cannot be used ({exc}).",
                                 "Delete it; it is measured again next time.") from exc
        plan = ChunkPlan(meta["n_ctx"], meta["n_chunk"], meta["n_batch"], meta["n_seq"])
        return cls(plan, meta["n_vocab"], meta["vocab_digest"], tokens, rows, meta["top_k"],
                   meta["tail_samples"], meta["source"])


def cache_path(cache_folder: Path, source: Path, text: bytes, n_ctx: int, chunks: Optional[int],
               n_batch: int, top_k: int, tail_samples: int) -> Path:
    """Where the base pass of ``source`` over ``text`` with these settings is cached.

    A changed source file (size or modification time) or text gets a new name, so a stale
    pass is never reused.
    """
    source = Path(source).resolve()
    st = source.stat()
    key = json.dumps({"v": FORMAT_VERSION, "source": str(source), "size": st.st_size,
                      "mtime_ns": st.st_mtime_ns, "text": hashlib.sha256(text).hexdigest(), "n_ctx": n_ctx,
                      "chunks": chunks, "n_batch": n_batch, "top_k": top_k,
                      "tail_samples": tail_samples}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return cache_folder / CACHE_FOLDER / f"{source.stem[:60]}-{digest}.npz"
