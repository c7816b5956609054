"""Images in the engine: llama.cpp's libmtmd driven directly (engine process only).

A model loaded with its vision encoder (an *mmproj* file) gets a :class:`VisionEncoder`.
A prompt with images is rendered with libmtmd's media marker where each image goes and
tokenized by ``mtmd_tokenize`` into text chunks and image chunks; :class:`ImagePrompt`
lays them out as one token list the scheduler and the prompt cache understand: an image
chunk of *n* tokens is *n* copies of a placeholder id (a negative number derived from the
image's SHA-256), so a conversation that sends the same picture again shares the prefix
and reuses the KV cells, and a different picture differs at its first cell. A prefix is
never kept or cut inside an image (:meth:`ImagePrompt.whole_prefix`).

An image chunk is evaluated on its own, not in the shared text batch: ``mtmd_encode_chunk``
runs the vision encoder, then ``mtmd_helper_decode_image_chunk`` writes its embeddings into
the sequence's KV cells — with non-causal attention for the models that need it (Gemma 3),
which llama.cpp can only do when the whole image fits one micro-batch; the load makes the
batches large enough (``settings``, from the mmproj's header).

Why not llama-cpp-python's multimodal chat handlers: they clear the cache and encode every
image again on every call, take images only from user messages, and fetch URLs.

Positions are counted apart from tokens: an image of M-RoPE models (Qwen2-VL and later)
takes fewer positions than tokens (its tokens sit on a grid of rows and columns, the
text after it continues from its largest side), so an :class:`ImageSpan` carries both
counts and :func:`position_after` turns a token count into the position llama.cpp
expects (the KV cells of a sequence are addressed by position).
"""

from __future__ import annotations

import ctypes
import hashlib
import time
from dataclasses import dataclass, field
from typing import Optional

import functools

import llama_cpp

from models.foundation.errors import QuantDeskError
from models.images import check_image


@functools.cache
def _mtmd():
    """llama-cpp-python's libmtmd bindings, loaded when a vision encoder is: a build
    without libmtmd still runs text models (the scheduler imports this module)."""
    try:
        from llama_cpp import mtmd_cpp
    except (ImportError, OSError, RuntimeError) as exc:
        raise QuantDeskError(f"This QuantDesk's llama.cpp cannot read images (libmtmd: {exc}).",
                             "Load the model without its mmproj file, or reinstall QuantDesk.") from exc
    return mtmd_cpp


def placeholder_id(digest: bytes) -> int:
    """The token id an image's cells carry in token lists: negative (never a vocabulary
    id), within int32 (prompt-cache keys pack ids in 4 bytes), from the image's hash."""
    return -1 - (int.from_bytes(digest[:4], "little") & 0x3FFFFFFF)


@dataclass
class ImageSpan:
    """One image chunk of a prompt: where it starts in the token list, its tokens, and the
    positions it takes (fewer than its tokens with M-RoPE). A picture cut into tiles
    (SmolVLM) has one chunk per tile and one for the whole: ``picture`` numbers the
    pictures of the prompt, ``last`` marks each one's final chunk."""

    start: int
    n_tokens: int
    chunk: object  # mtmd_input_chunk_p, owned by the prompt's chunk list
    n_pos: int = 0
    picture: int = 0
    last: bool = True


def position_after(tokens: list[int], count: int, image_positions: dict[int, tuple[int, int]]) -> int:
    """The position that follows ``tokens[:count]``: one per text token, and for each whole
    image its positions (``image_positions``: placeholder id → (tokens, positions), for the
    images whose two counts differ; others count one position per token)."""
    if not image_positions or count == 0 or min(tokens[:count]) >= 0:
        return count
    position, i = 0, 0
    while i < count:
        token = tokens[i]
        sizes = image_positions.get(token) if token < 0 else None
        if sizes is None:
            position, i = position + 1, i + 1
            continue
        n_tokens, n_pos = sizes
        run = i
        while run < count and tokens[run] == token:
            run += 1
        whole, rest = divmod(run - i, n_tokens)
        position += whole * n_pos + rest
        i = run
    return position


@dataclass
class ImagePrompt:
    """A tokenized prompt with images: tokens (images as placeholder runs) and the chunks.

    Free it with :meth:`close` (the chunks hold the preprocessed pictures).
    """

    tokens: list[int]
    spans: dict[int, ImageSpan] = field(default_factory=dict)
    chunks: object = None

    def whole_prefix(self, n: int) -> int:
        """``n`` moved back to the start of the image it would cut, if any."""
        for span in self.spans.values():
            if span.start < n < span.start + span.n_tokens:
                return span.start
        return n

    def next_image(self, position: int) -> Optional[int]:
        """The start of the first image at or after ``position``."""
        starts = [s for s in self.spans if s >= position]
        return min(starts) if starts else None

    @property
    def image_count(self) -> int:
        """The pictures (not chunks: a tiled picture has several)."""
        return len({span.picture for span in self.spans.values()})

    def position_counts(self) -> dict[int, tuple[int, int]]:
        """Placeholder id → (tokens, positions) of the images whose counts differ."""
        return {self.tokens[s.start]: (s.n_tokens, s.n_pos) for s in self.spans.values()
                if s.n_pos != s.n_tokens}

    def close(self) -> None:
        if self.chunks is not None:
            _mtmd().mtmd_input_chunks_free(self.chunks)
            self.chunks = None


class VisionEncoder:
    """A model's vision encoder (mmproj), loaded beside it with libmtmd.

    Args:
        path: The mmproj GGUF file.
        model: The loaded ``llama_model`` pointer (``Llama.model``).
        use_gpu: Run the encoder on the GPU (when the model's layers go there).
        threads: CPU threads for encoding.
    """

    def __init__(self, path: str, model, use_gpu: bool, threads: int) -> None:
        params = _mtmd().mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = threads
        params.print_timings = False
        self.ctx = _mtmd().mtmd_init_from_file(path.encode("utf-8"), model, params)
        if not self.ctx:
            raise QuantDeskError(
                f"llama.cpp could not load the vision encoder {path}.",
                "Check that the mmproj file belongs to this model and is complete; the log has "
                "llama.cpp's report.")
        self.path = path
        self.vision = bool(_mtmd().mtmd_support_vision(self.ctx))
        self.mrope = bool(_mtmd().mtmd_decode_use_mrope(self.ctx))
        self.marker = _mtmd().mtmd_default_marker().decode("utf-8")

    def close(self) -> None:
        if self.ctx:
            _mtmd().mtmd_free(self.ctx)
            self.ctx = None

    def tokenize(self, text: str, images: list[bytes], add_special: bool) -> ImagePrompt:
        """``text`` with one :attr:`marker` per image → an :class:`ImagePrompt`."""
        if not self.vision:
            raise QuantDeskError("This model's mmproj file has no vision encoder (it reads audio only).",
                                 "Send text, or load the model with a vision mmproj.")
        bitmaps, ids = [], []
        try:
            for data in images:
                info = check_image(data)
                ids.append(info.sha256)
                buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
                bitmap = _mtmd().mtmd_helper_bitmap_init_from_buf(self.ctx, buffer, len(data), False)
                if not bitmap:
                    raise QuantDeskError(
                        f"The {info.format} image ({info.width}×{info.height}) could not be decoded; "
                        "the file is damaged or truncated.", "Send the image again, or another copy of it.")
                _mtmd().mtmd_bitmap_set_id(bitmap, info.sha256.encode("ascii"))
                bitmaps.append(bitmap)
            return self._tokenize(text, bitmaps, add_special, ids)
        finally:
            for bitmap in bitmaps:
                _mtmd().mtmd_bitmap_free(bitmap)

    def _tokenize(self, text: str, bitmaps: list, add_special: bool, picture_ids: list[str]) -> ImagePrompt:
        raw = text.encode("utf-8")
        source = _mtmd().mtmd_input_text(raw, len(raw), add_special, True)
        array = (_mtmd().mtmd_bitmap_p_ctypes * max(len(bitmaps), 1))(*bitmaps)
        chunks = _mtmd().mtmd_input_chunks_init()
        code = _mtmd().mtmd_tokenize(self.ctx, chunks, ctypes.byref(source), array, len(bitmaps))
        if code != 0:
            _mtmd().mtmd_input_chunks_free(chunks)
            reason = {1: "the number of images does not match the image markers in the prompt",
                      2: "an image could not be preprocessed"}.get(code, f"error {code}")
            raise QuantDeskError(f"llama.cpp could not read the prompt's images: {reason}.",
                                 "Send the message again; if an image is damaged, send another copy.")
        prompt = ImagePrompt([], chunks=chunks)
        seen: dict[bytes, int] = {}  # an image split in tiles has one chunk per tile
        chunk_ids: list[bytes] = []
        for i in range(_mtmd().mtmd_input_chunks_size(chunks)):
            chunk = _mtmd().mtmd_input_chunks_get(chunks, i)
            kind = _mtmd().mtmd_input_chunk_get_type(chunk)
            if kind == _mtmd().MTMD_INPUT_CHUNK_TYPE_TEXT:
                count = ctypes.c_size_t(0)
                pointer = _mtmd().mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(count))
                prompt.tokens.extend(pointer[i] for i in range(count.value))
                continue
            n_tokens = _mtmd().mtmd_input_chunk_get_n_tokens(chunk)
            chunk_id = _mtmd().mtmd_input_chunk_get_id(chunk) or b""
            seen[chunk_id] = seen.get(chunk_id, -1) + 1
            chunk_ids.append(chunk_id)
            digest = hashlib.sha256(chunk_id + b"/%d/%d" % (seen[chunk_id], n_tokens)).digest()
            prompt.spans[len(prompt.tokens)] = ImageSpan(len(prompt.tokens), n_tokens, chunk,
                                                         _mtmd().mtmd_input_chunk_get_n_pos(chunk))
            prompt.tokens.extend([placeholder_id(digest)] * n_tokens)
        number_pictures(list(prompt.spans.values()), [key.decode("ascii", "replace") for key in chunk_ids],
                        picture_ids)
        return prompt

    def evaluate(self, span: ImageSpan, llama_ctx, n_past: int, seq_id: int, n_batch: int) -> tuple[float, float]:
        """Encode one image and write it into ``seq_id``'s KV cells from ``n_past`` on.

        Returns:
            Seconds spent encoding and decoding it.

        Raises:
            QuantDeskError: llama.cpp failed (the cells written so far are the caller's to drop).
        """
        if span.n_tokens > n_batch and _mtmd().mtmd_decode_use_non_causal(self.ctx, span.chunk):
            # llama.cpp would abort the process: a non-causal image must fit one micro-batch.
            raise QuantDeskError(
                f"An image takes {span.n_tokens} tokens, more than the {n_batch}-token batch the "
                "model was loaded with, and this model must read an image in one batch.",
                f"Reload the model with a batch and micro-batch size of at least {span.n_tokens}.")
        started = time.perf_counter()
        if _mtmd().mtmd_encode_chunk(self.ctx, span.chunk) != 0:
            raise QuantDeskError("llama.cpp's vision encoder failed on an image.",
                                 "Send the message again; the log has llama.cpp's report.")
        encoded = time.perf_counter()
        embd = _mtmd().mtmd_get_output_embd(self.ctx)
        new_n_past = llama_cpp.llama_pos(0)
        code = _mtmd().mtmd_helper_decode_image_chunk(self.ctx, llama_ctx, span.chunk, embd, n_past, seq_id,
                                                   n_batch, ctypes.byref(new_n_past),
                                                   _mtmd().mtmd_helper_post_decode_callback(), None)
        if code != 0:
            raise ImageDecodeFailed(code)
        return encoded - started, time.perf_counter() - encoded


def number_pictures(spans: list[ImageSpan], chunk_ids: list[str], picture_ids: list[str]) -> None:
    """Set each span's picture number and last-chunk mark.

    libmtmd gives a picture's chunks one after another, each with the picture's id (its
    SHA-256), but does not say where a picture ends: the same picture sent twice gives
    two runs of the same id. Identical pictures are cut alike, so each id's chunks divided
    by its pictures is the run length of one picture.
    """
    pictures = {key: picture_ids.count(key) for key in set(picture_ids)}
    per_picture = {key: max(chunk_ids.count(key) // count, 1) for key, count in pictures.items()}
    picture, left = -1, 0
    for span, key in zip(spans, chunk_ids):
        if left == 0:
            picture, left = picture + 1, per_picture.get(key, 1)
        left -= 1
        span.picture, span.last = picture, left == 0


class ImageDecodeFailed(QuantDeskError):
    """llama_decode of an image's embeddings returned ``code`` (2: aborted by a cancel)."""

    def __init__(self, code: int) -> None:
        super().__init__(f"llama.cpp failed to read an image into the conversation (error {code}).",
                         "Send the message again; if it keeps failing, reload the model.")
        self.code = code
