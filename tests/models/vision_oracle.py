"""transformers as the oracle of a reply about an image (tiny Gemma 3 checkpoints, CPU).

The prompt is laid out as llama-server lays it out: the rendered text with the image's
marker replaced by ``<start_of_image>``, one image token per image embedding and
``<end_of_image>``, nothing added between (transformers' own processor adds blank lines).
Pixels are preprocessed in numpy exactly as the model card says: scaled to 0..1, then
normalized by the preprocessor's mean and std, channels first. The variants a broken
preprocessing would produce (:data:`WRONG_PREPROCESSING`) give the tests their contrast.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np

#: Preprocessing mistakes a vision pipeline can make: each must change the reply's numbers.
WRONG_PREPROCESSING: dict[str, Callable[[np.ndarray, dict], np.ndarray]] = {
    "BGR": lambda x, pre: _normalize(x[..., ::-1], pre),
    "flipped": lambda x, pre: _normalize(x[:, ::-1], pre),
    "transposed": lambda x, pre: _normalize(x.transpose(1, 0, 2), pre),
    "mean/std 0.5": lambda x, pre: _normalize(x, {"image_mean": [0.5] * 3, "image_std": [0.5] * 3}),
    "pixels 0..255": lambda x, pre: _normalize(x * 255.0, pre),
}


def _normalize(x: np.ndarray, pre: dict) -> np.ndarray:
    mean = np.asarray(pre["image_mean"], np.float32)
    std = np.asarray(pre["image_std"], np.float32)
    return np.ascontiguousarray(((x - mean) / std).transpose(2, 0, 1), dtype=np.float32)


def pixel_values(picture: np.ndarray, model_dir: Path, mistake: str | None = None) -> np.ndarray:
    """The model's input for an RGB ``picture`` already at the encoder's size."""
    pre = json.loads((Path(model_dir) / "preprocessor_config.json").read_text())
    x = picture.astype(np.float32) / 255.0
    return (WRONG_PREPROCESSING[mistake](x, pre) if mistake else _normalize(x, pre))[None]


class Gemma3Oracle:
    """A tiny Gemma 3 image-text checkpoint in transformers, float32, eager attention."""

    def __init__(self, model_dir: Path) -> None:
        import torch
        import transformers

        self.torch = torch
        self.dir = Path(model_dir)
        self.config = json.loads((self.dir / "config.json").read_text())
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(self.dir)
        self.model = transformers.Gemma3ForConditionalGeneration.from_pretrained(
            self.dir, dtype=torch.float32, attn_implementation="eager").eval()

    def prompt_ids(self, segments: list, image_tokens: int) -> list[int]:
        """Token ids of text segments and images (``None`` for each image), in order."""
        ids: list[int] = []
        for segment in segments:
            if segment is None:
                ids += [self.config["boi_token_index"]] + [self.config["image_token_index"]] * image_tokens \
                    + [self.config["eoi_token_index"]]
            elif segment:
                ids += self.tokenizer(segment, add_special_tokens=False).input_ids
        return ids

    def logprobs(self, ids: list[int], pixels: list[np.ndarray], reply: list[int]) -> list[float]:
        """The log-probability of each ``reply`` token after ``ids`` and the reply so far."""
        torch = self.torch
        sequence = torch.tensor([ids + reply])
        image = self.config["image_token_index"]
        with torch.no_grad():
            logits = self.model(input_ids=sequence, pixel_values=torch.from_numpy(np.concatenate(pixels)),
                                token_type_ids=(sequence == image).long()).logits[0].double()
        rows = torch.log_softmax(logits[len(ids) - 1: len(ids) - 1 + len(reply)], dim=-1)
        return [float(rows[i, t]) for i, t in enumerate(reply)]

    def greedy(self, ids: list[int], pixels: list[np.ndarray], count: int) -> tuple[list[int], list[float]]:
        """``count`` greedy tokens after ``ids`` and their log-probabilities."""
        torch = self.torch
        image = self.config["image_token_index"]
        tokens: list[int] = []
        values: list[float] = []
        for _ in range(count):
            sequence = torch.tensor([ids + tokens])
            with torch.no_grad():
                logits = self.model(input_ids=sequence, pixel_values=torch.from_numpy(np.concatenate(pixels)),
                                    token_type_ids=(sequence == image).long()).logits[0, -1].double()
            row = torch.log_softmax(logits, dim=-1)
            best = int(row.argmax())
            tokens.append(best)
            values.append(float(row[best]))
        return tokens, values

    def token_bytes(self, token: int) -> list[int]:
        """A token's bytes as llama.cpp reports them (byte pieces ``<0xNN>`` as that byte)."""
        piece = self.tokenizer.convert_ids_to_tokens([token])[0]
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            return [int(piece[3:5], 16)]
        return list(piece.replace("\u2581", " ").encode("utf-8"))


class Qwen2VLOracle:
    """A tiny Qwen2-VL, Qwen2.5-VL or Qwen3-VL image-text checkpoint in transformers,
    float32, eager attention (Qwen3-VL's positions and patch order are Qwen2-VL's).

    The prompt is the one libmtmd builds (its text chunks' token ids, and each image chunk
    as that many ``image_token_id`` placeholders); positions follow M-RoPE as both define
    them (an image of ``nx`` × ``ny`` merged patches at ``(t, t + y, t + x)``, the text
    after it from ``t + max(nx, ny)``), passed explicitly. Pixels go through transformers'
    Qwen2VLImageProcessor's patch order, in numpy (no resize: the pictures' sides are
    already multiples of 16).
    """

    def __init__(self, model_dir: Path) -> None:
        import torch
        import transformers

        self.torch = torch
        self.dir = Path(model_dir)
        self.config = json.loads((self.dir / "config.json").read_text())
        self.preprocessor = json.loads((self.dir / "preprocessor_config.json").read_text())
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(self.dir)
        model_class = getattr(transformers, self.config["architectures"][0])  # Qwen2-VL ... Qwen3-VL
        self.model = model_class.from_pretrained(self.dir, dtype=torch.float32, attn_implementation="eager").eval()

    def pixels(self, picture: np.ndarray, mistake: str | None = None) -> tuple:
        """``(pixel_values, image_grid_thw)`` of an RGB picture whose sides are multiples of
        the patch × merge size, patchified as Qwen2VLImageProcessor does: the frame
        repeated to a temporal patch, then patches in merge-window order."""
        torch, pre = self.torch, self.preprocessor
        x = picture.astype(np.float32) / 255.0
        chw = WRONG_PREPROCESSING[mistake](x, pre) if mistake else _normalize(x, pre)
        p, merge, frames = pre["patch_size"], pre["merge_size"], pre["temporal_patch_size"]
        channels, height, width = chw.shape
        gh, gw = height // p, width // p
        patches = np.repeat(chw[None], frames, axis=0).reshape(
            1, frames, channels, gh // merge, merge, p, gw // merge, merge, p)
        patches = patches.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8).reshape(gh * gw, channels * frames * p * p)
        return torch.from_numpy(np.ascontiguousarray(patches)), torch.tensor([[1, gh, gw]])

    def _inputs(self, layout: list[dict], reply: list[int]):
        ids, positions, t = [], [], 0
        for chunk in layout:
            if "text" in chunk:
                ids += chunk["text"]
                positions += [(p, p, p) for p in range(t, t + len(chunk["text"]))]
                t += len(chunk["text"])
            else:
                ids += [self.config["image_token_id"]] * chunk["image"]
                positions += [(t, t + y, t + x) for y in range(chunk["ny"]) for x in range(chunk["nx"])]
                t += max(chunk["nx"], chunk["ny"])
        assert self.config["image_token_id"] not in [i for c in layout for i in c.get("text", [])]
        ids += reply
        positions += [(p, p, p) for p in range(t, t + len(reply))]
        torch = self.torch
        return torch.tensor([ids]), torch.tensor(positions).T[:, None, :]

    def _log_softmax_rows(self, layout, pixels, reply, rows):
        torch = self.torch
        input_ids, position_ids = self._inputs(layout, reply)
        values, grid = pixels
        with torch.no_grad():
            logits = self.model(input_ids=input_ids, position_ids=position_ids, pixel_values=values,
                                image_grid_thw=grid).logits[0].double()
        return torch.log_softmax(logits[rows], dim=-1)

    def greedy(self, layout: list[dict], pixels, count: int) -> tuple[list[int], list[float]]:
        """``count`` greedy tokens after the prompt and their log-probabilities."""
        tokens: list[int] = []
        values: list[float] = []
        for _ in range(count):
            row = self._log_softmax_rows(layout, pixels, tokens, slice(-1, None))[0]
            best = int(row.argmax())
            tokens.append(best)
            values.append(float(row[best]))
        return tokens, values

    def logprobs(self, layout: list[dict], pixels, reply: list[int]) -> list[float]:
        """The log-probability of each ``reply`` token after the prompt and the reply so far."""
        rows = self._log_softmax_rows(layout, pixels, reply, slice(-len(reply) - 1, -1))
        return [float(rows[i, t]) for i, t in enumerate(reply)]

    def token_bytes(self, token: int) -> list[int]:
        """A token's bytes (byte-level BPE: each character stands for one byte)."""
        from tests.factory.tokenizer import byte_level_decoder

        decode = byte_level_decoder()
        return [decode[c] for c in self.tokenizer.convert_ids_to_tokens([token])[0]]


class Idefics3Oracle:
    """A tiny SmolVLM (Idefics3) image-text checkpoint in transformers, float32, eager attention.

    The prompt is the one libmtmd builds (its text chunks' token ids, each image chunk as
    that many ``image_token_id`` placeholders). Pixels come from transformers' own
    Idefics3 image processor (its Pillow backend, as transformers picks without
    torchvision): the picture scaled to the longest edge, then to whole tiles, cut into
    tiles row by row, and the overview last, all resized with Pillow's Lanczos filter —
    which libmtmd's resampler ports, fixed-point arithmetic included.
    """

    def __init__(self, model_dir: Path) -> None:
        import torch
        import transformers
        from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

        self.torch = torch
        self.dir = Path(model_dir)
        self.config = json.loads((self.dir / "config.json").read_text())
        self.preprocessor = json.loads((self.dir / "preprocessor_config.json").read_text())
        self.processor = Idefics3ImageProcessorPil.from_pretrained(self.dir)
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(self.dir)
        self.model = transformers.Idefics3ForConditionalGeneration.from_pretrained(
            self.dir, dtype=torch.float32, attn_implementation="eager").eval()

    def pixels(self, picture: np.ndarray, mistake: str | None = None):
        """``pixel_values`` (1 × images × 3 × tile × tile): the picture's tiles and overview;
        with a ``mistake``, each of them preprocessed that wrong way instead."""
        values = self.processor(images=[picture], return_tensors="np")["pixel_values"]
        if mistake is not None:
            mean = np.asarray(self.preprocessor["image_mean"], np.float32)
            std = np.asarray(self.preprocessor["image_std"], np.float32)
            images = [x.transpose(1, 2, 0) * std + mean for x in values[0]]  # back to 0..1, HWC
            values = np.stack([WRONG_PREPROCESSING[mistake](x, self.preprocessor) for x in images])[None]
        return self.torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))

    def _log_softmax_rows(self, layout: list[dict], pixels, reply: list[int], rows):
        torch = self.torch
        image = self.config["image_token_id"]
        ids = [i for chunk in layout for i in (chunk["text"] if "text" in chunk else [image] * chunk["image"])]
        assert image not in [i for c in layout for i in c.get("text", [])]
        with torch.no_grad():
            logits = self.model(input_ids=torch.tensor([ids + reply]), pixel_values=pixels).logits[0].double()
        return torch.log_softmax(logits[rows], dim=-1)

    greedy = Qwen2VLOracle.greedy
    logprobs = Qwen2VLOracle.logprobs
    token_bytes = Qwen2VLOracle.token_bytes
