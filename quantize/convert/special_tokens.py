"""Special-token ids, BOS/EOS insertion flags and the chat template, as GGUF metadata.

Sources, in the precedence the reference converter (gguf-py ``SpecialVocab``) uses:

- ids: ``tokenizer_config.json``'s ``bos_token``/``eos_token``/... (a string or an
  ``{"content": ...}`` dict) looked up in the vocabulary; otherwise ``config.json``'s
  ``bos_token_id``/``eos_token_id``/``pad_token_id``.
- add BOS/EOS: ``tokenizer.json``'s post-processor (a TemplateProcessing that starts with
  the BOS token adds it), otherwise ``tokenizer_config.json``'s ``add_bos_token``.
- chat template: ``tokenizer_config.json``'s ``chat_template``, otherwise
  ``chat_template.jinja``, otherwise ``chat_template.json``. A list of named templates
  becomes ``tokenizer.chat_template`` (the default) plus ``tokenizer.chat_template.<name>``.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from quantize.ggml_types import GGUFValueType

from quantize.convert.vocab import Vocab
from quantize.source import MetadataEntry

SPECIAL_KEYS = {  # HF name → GGUF key suffix (gguf-py spells "seperator")
    "bos": "bos_token_id", "eos": "eos_token_id", "unk": "unknown_token_id",
    "sep": "seperator_token_id", "pad": "padding_token_id", "cls": "cls_token_id",
    "mask": "mask_token_id",
}


def _content(entry: Any) -> Optional[str]:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict) and isinstance(entry.get("content"), str):
        return entry["content"]
    return None


def special_token_ids(vocab: Vocab, tokenizer_config: dict, config: dict) -> dict[str, int]:
    """HF special-token name (bos, eos, ...) → token id."""
    ids: dict[str, int] = {}
    for typ in SPECIAL_KEYS:
        text = _content(tokenizer_config.get(f"{typ}_token"))
        token_id = vocab.id_of(text) if text is not None else None
        if token_id is None:
            from_config = config.get(f"{typ}_token_id")
            if isinstance(from_config, list):
                from_config = from_config[0] if from_config else None
            if isinstance(from_config, int) and 0 <= from_config < len(vocab.tokens):
                token_id = from_config
        if token_id is not None:
            ids[typ] = token_id
    return ids


def add_special_flags(tokenizer_json: dict, tokenizer_config: dict, bos_text: Optional[str],
                      eos_text: Optional[str]) -> dict[str, bool]:
    """Whether the tokenizer inserts BOS / EOS around every encoded text."""
    flags: dict[str, bool] = {}
    post = tokenizer_json.get("post_processor") or {}
    for proc in post.get("processors", [post]) if post else []:
        kind = proc.get("type")
        if kind == "ByteLevel":
            flags.setdefault("bos", False)
            flags.setdefault("eos", False)
        elif kind == "TemplateProcessing":
            single = proc.get("single") or []
            if len(single) > 1:
                first = (single[0].get("SpecialToken") or {}).get("id")
                last = (single[-1].get("SpecialToken") or {}).get("id")
                if first:
                    flags["bos"] = first == bos_text
                if last:
                    flags["eos"] = last == eos_text
    for typ in ("bos", "eos"):
        value = tokenizer_config.get(f"add_{typ}_token")
        if isinstance(value, bool):
            flags.setdefault(typ, value)
    return flags


def chat_templates(tokenizer_config: dict, jinja: Optional[str], template_json: Optional[dict]) -> list[tuple[str, str]]:
    """``(gguf key, template)`` pairs; empty when the model has no chat template."""
    template: Any = tokenizer_config.get("chat_template")
    if template is None and jinja is not None:
        template = jinja
    if template is None and template_json is not None:
        template = template_json.get("chat_template")
    if isinstance(template, str):
        return [("tokenizer.chat_template", template)]
    out = []
    if isinstance(template, list):
        for item in template:
            if not isinstance(item, dict) or not isinstance(item.get("template"), str):
                continue
            name = item.get("name", "default")
            key = "tokenizer.chat_template" if name == "default" else f"tokenizer.chat_template.{name}"
            out.append((key, item["template"]))
        names = [i.get("name") for i in template if isinstance(i, dict) and i.get("name") != "default"]
        if names:
            out.append(("tokenizer.chat_templates", names))
    return out


def tokenizer_entries(vocab: Vocab, folder, config: dict, add_space_prefix: Optional[bool]) -> list[MetadataEntry]:
    """All ``tokenizer.*`` metadata for ``vocab`` read from ``folder``'s side files."""
    S, U32, F32, I32, BOOL, ARR = (GGUFValueType.STRING, GGUFValueType.UINT32, GGUFValueType.FLOAT32,
                                   GGUFValueType.INT32, GGUFValueType.BOOL, GGUFValueType.ARRAY)
    tokenizer_config = folder.json("tokenizer_config.json") or {}
    tokenizer_json = folder.json("tokenizer.json") or {}
    out = [MetadataEntry("tokenizer.ggml.model", vocab.model, S),
           MetadataEntry("tokenizer.ggml.pre", vocab.pre, S),
           MetadataEntry("tokenizer.ggml.tokens", vocab.tokens, ARR, S)]
    if vocab.scores is not None:
        out.append(MetadataEntry("tokenizer.ggml.scores", vocab.scores, ARR, F32))
    out.append(MetadataEntry("tokenizer.ggml.token_type", vocab.types, ARR, I32))
    if vocab.merges:
        out.append(MetadataEntry("tokenizer.ggml.merges", vocab.merges, ARR, S))
    ids = special_token_ids(vocab, tokenizer_config, config)
    for typ, token_id in ids.items():
        out.append(MetadataEntry(f"tokenizer.ggml.{SPECIAL_KEYS[typ]}", token_id, U32))
    bos = vocab.tokens[ids["bos"]] if "bos" in ids else None
    eos = vocab.tokens[ids["eos"]] if "eos" in ids else None
    for typ, flag in add_special_flags(tokenizer_json, tokenizer_config, bos, eos).items():
        out.append(MetadataEntry(f"tokenizer.ggml.add_{typ}_token", flag, BOOL))
    if add_space_prefix is None:
        add_space_prefix = tokenizer_config.get("add_prefix_space")
    if isinstance(add_space_prefix, bool):
        out.append(MetadataEntry("tokenizer.ggml.add_space_prefix", add_space_prefix, BOOL))
    template_json = None
    if folder.has("chat_template.json"):
        template_json = json.loads(folder.text("chat_template.json"))
    for key, template in chat_templates(tokenizer_config, folder.text("chat_template.jinja"), template_json):
        if isinstance(template, list):
            out.append(MetadataEntry(key, template, ARR, S))
        else:
            out.append(MetadataEntry(key, template, S))
    return out
