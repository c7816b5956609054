"""``quantdesk convert MODEL_DIR``: a Hugging Face safetensors folder → an F32/F16/BF16 GGUF
(and, for an image-text model, its vision encoder's ``mmproj-*.gguf`` beside it)."""

from __future__ import annotations

import argparse
from pathlib import Path


def run(args: argparse.Namespace) -> int:
    from app.core.console import run_job
    from quantize.convert.convert import convert_with_projector

    # QuantDeskError (bad folder, cancel) propagates to app.cli, which prints its sentence.
    out, projector = run_job(lambda report, cancel: convert_with_projector(
        Path(args.model_dir), args.output, args.outtype, report, cancel,
        pre_tokenizer=args.pre_tokenizer))
    from models.library import Library

    Library().record_output(out, "converted")
    print(out)
    if projector is not None:
        print(projector)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("convert", help="convert a Hugging Face safetensors folder to GGUF")
    parser.add_argument("model_dir", metavar="MODEL_DIR",
                        help="folder with config.json, *.safetensors and tokenizer files")
    parser.add_argument("--outtype", choices=("f16", "bf16", "f32", "q8_0"), default="f16",
                        help="type of the weight matrices (norms and biases stay F32); default f16")
    parser.add_argument("-o", "--output", type=Path, default=None,
                        help="output file (default: MODEL_DIR/<name>-<OUTTYPE>.gguf); an image-text "
                             "model's vision encoder goes beside it as mmproj-<file name>")
    parser.add_argument("--pre-tokenizer", default=None, metavar="NAME",
                        help="llama.cpp pre-tokenizer for a BPE tokenizer QuantDesk does not "
                             "recognise (llama-bpe, qwen2, smollm, gpt-2, ...); only if you know it matches")
    parser.set_defaults(func=run)
