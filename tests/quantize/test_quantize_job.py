"""``quantize_model`` writes llama_model_quantize's files, byte for byte, and behaves as a job.

Oracle: ``llama_model_quantize`` (libllama via ctypes, default params, nthread=2) on the
same F16 input. Inputs: tiny random llama GGUFs (tied/untied head, GQA, row widths that
force k-quant and F16 fallbacks, 8 experts, F32 and BF16 inputs) and the real SmolLM2-135M weights
(its Q4_1 release dequantized to F16). Quantized SmolLM2 files must also load in
llama-cpp-python and answer.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from app.cli import main
from models.foundation.errors import Cancelled, QuantDeskError
from models.foundation.jobs import CancelToken
from models.library import Library
from quantize.ftypes import FILE_TYPES
from quantize.gguf_source import GGUFSource
from quantize.job import QuantizeOptions, QuantizeTarget, quantize_model
from quantize.source import StoredBytes
from tests.quantize.llama_quant_oracle import llama_quantize
from tests.quantize.model_files import (TinyLlama, describe_differences, tensor_types,
                                        write_dequantized_f16, write_tiny_llama)

TINY = {
    "tied-gqa4": TinyLlama(),
    "untied-odd-widths": TinyLlama(n_layer=16, n_embd=288, n_head=4, n_head_kv=4, n_ff=336, n_vocab=300,
                                   tied=False, seed=1),
    "moe-8-experts": TinyLlama(n_layer=4, n_embd=256, n_head=4, n_head_kv=1, n_ff=256, n_vocab=300,
                               tied=False, n_expert=8, seed=2),
    "f32-input": TinyLlama(n_layer=3, dtype="f32", seed=5),
    "bf16-input": TinyLlama(n_layer=3, tied=False, dtype="bf16", seed=6),
}
NO_IMATRIX_TYPES = [ft for ft in FILE_TYPES.values() if not ft.needs_imatrix]


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tiny-models")
    return {name: write_tiny_llama(folder / f"{name}.gguf", cfg) for name, cfg in TINY.items()}


def _compare_all(src: Path, folder: Path, types, **options) -> list[str]:
    """Quantize ``src`` to every type in one job, then each with llama.cpp; list differences."""
    targets = [QuantizeTarget(ft, folder / f"ours-{ft.name}.gguf") for ft in types]
    quantize_model(src, targets, QuantizeOptions(threads=2, **options))
    failures = []
    for ft in types:
        ref = folder / f"llama-{ft.name}.gguf"
        assert llama_quantize(src, ref, ft.ftype, **options) == 0, f"llama.cpp failed on {ft.name}"
        problem = describe_differences(folder / f"ours-{ft.name}.gguf", ref)
        if problem:
            failures.append(f"{ft.name}: {problem}")
    return failures


@pytest.mark.slow
@pytest.mark.parametrize("model", TINY)
def test_every_file_type_matches_llama_model_quantize(tiny_models, tmp_path, model):
    failures = _compare_all(tiny_models[model], tmp_path, NO_IMATRIX_TYPES)
    assert not failures, "\n".join(failures)


OVERRIDE_CASES = [
    ("tied-gqa4", "Q4_K_M", dict(pure=True)),
    ("tied-gqa4", "Q4_K_M", dict(output_tensor_type=T.Q8_0)),  # tied: the embedding follows
    ("tied-gqa4", "Q5_K_M", dict(token_embedding_type=T.Q4_0)),
    ("tied-gqa4", "F16", dict(token_embedding_type=T.Q8_0, output_tensor_type=T.Q6_K)),
    ("untied-odd-widths", "Q3_K_M", dict(output_tensor_type=T.Q5_0, token_embedding_type=T.Q8_0)),
    ("untied-odd-widths", "Q6_K", dict(pure=True)),
    ("moe-8-experts", "Q4_K_S", dict(pure=True, output_tensor_type=T.Q4_K)),
]


@pytest.mark.parametrize("model,type_name,options", OVERRIDE_CASES)
def test_overrides_match_llama_model_quantize_with_the_same_params(tiny_models, tmp_path, model,
                                                                    type_name, options):
    failures = _compare_all(tiny_models[model], tmp_path, [FILE_TYPES[type_name]], **options)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name", ["Q2_K_S", "IQ3_XXS", "IQ3_XS", "IQ2_XXS", "IQ2_M", "IQ1_S", "IQ1_M"])
def test_types_that_need_an_importance_matrix_fail_without_one_like_llama_quantize(tiny_models, tmp_path, name):
    src = tiny_models["tied-gqa4"]
    assert llama_quantize(src, tmp_path / "ref.gguf", FILE_TYPES[name].ftype) != 0
    with pytest.raises(QuantDeskError, match="needs an importance matrix") as refused:
        quantize_model(src, [QuantizeTarget(FILE_TYPES[name], tmp_path / "ours.gguf")])
    assert "quantdesk imatrix" in refused.value.user_message
    assert not (tmp_path / "ours.gguf").exists()


class CountingSource:
    """A GGUF source that counts loads and can fail on the n-th one."""

    def __init__(self, path: Path, fail_at: int | None = None) -> None:
        self._inner = GGUFSource(path)
        self.path, self.description, self.arch = path, self._inner.description, self._inner.arch
        self.loads: list[str] = []
        self.fail_at = fail_at

    def metadata(self):
        return self._inner.metadata()

    def tensors(self):
        import dataclasses

        def wrap(t):
            def counted(load):
                def counting_load():
                    self.loads.append(t.name)
                    if self.fail_at is not None and len(self.loads) == self.fail_at:
                        raise QuantDeskError(f"{t.name} could not be read.")
                    return load()
                return counting_load
            def counted_read(read_into):
                def counting_read(buffer, start):
                    if start == 0:  # a copy from the file starts
                        counted(lambda: None)()
                    return read_into(buffer, start)
                return counting_read
            # Every way of reading counts: the values as stored (quantized outputs), or the
            # bytes from the file (a tensor every output keeps as it is).
            return dataclasses.replace(t, load=counted(t.load), load_stored=counted(t.load_stored),
                                       stored_bytes=StoredBytes(t.stored_bytes.nbytes,
                                                                counted_read(t.stored_bytes.read_into)))
        return [wrap(t) for t in self._inner.tensors()]


def test_several_targets_load_each_tensor_once_and_equal_separate_jobs(tiny_models, tmp_path):
    src = tiny_models["moe-8-experts"]
    names = ["Q4_K_M", "Q8_0", "F16"]
    counting = CountingSource(src)
    result = quantize_model(counting, [QuantizeTarget(FILE_TYPES[n], tmp_path / f"all-{n}.gguf") for n in names])
    assert sorted(counting.loads) == sorted(t.name for t in GGUFSource(src).tensors())
    assert len(result.outputs) == 3 and "Q4_K_M: " in result.summary
    for n in names:
        quantize_model(src, [QuantizeTarget(FILE_TYPES[n], tmp_path / f"one-{n}.gguf")], QuantizeOptions(threads=1))
        assert (tmp_path / f"all-{n}.gguf").read_bytes() == (tmp_path / f"one-{n}.gguf").read_bytes()


def test_progress_is_reported_per_tensor_up_to_the_total(tiny_models, tmp_path):
    seen = []
    targets = [QuantizeTarget(FILE_TYPES["Q4_K_M"], tmp_path / "o.gguf"), QuantizeTarget(FILE_TYPES["Q6_K"], tmp_path / "p.gguf")]
    quantize_model(tiny_models["tied-gqa4"], targets, report=seen.append)
    # First the kernels of every quantized type the files hold, one "Preparing" step each
    # (compiled on first use, else loaded from the cache), then the tensors.
    preparing = [p for p in seen if p.stage == "Preparing"]
    assert seen[:len(preparing)] == preparing
    written = {qtype for target in targets for qtype in tensor_types(target.path).values()} - {T.F32, T.F16, T.BF16}
    assert {p.detail.split()[1] for p in preparing} == {t.name for t in written}
    assert all(p.total is None for p in preparing)  # cached or compiled: not known ahead
    seen = seen[len(preparing):]
    assert seen and all(p.stage == "Quantizing" for p in seen)
    assert [p.done for p in seen] == sorted(p.done for p in seen)
    assert seen[-1].done == pytest.approx(seen[-1].total) and seen[-1].fraction == 1.0
    assert "→ Q4_K/Q6_K" in " ".join(p.detail for p in seen)


LOADER = r"""
import sys, threading
from quantize import kernel_loader
assert "numba" not in sys.modules  # the module itself imports nothing heavy
kernel_loader.start(["Q8_0", "NOT_A_TYPE", "F16"])
assert [t for t in threading.enumerate() if t.name == "kernel-loader"]
assert kernel_loader.wait(600)
from quantize.blocks import KERNELS
print(sorted(qtype.name for qtype, (ref, impl) in KERNELS.items() if ref.signatures))
"""


def test_kernels_load_on_their_own_thread():
    """numba and the kernels of the asked types load on a thread while a job starts; names
    that are no quantized type are skipped (the job reports them)."""
    result = subprocess.run([sys.executable, "-c", LOADER], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[-2] == "['Q8_0']"


def test_cancel_leaves_no_output(tiny_models, tmp_path):
    token = CancelToken()
    targets = [QuantizeTarget(FILE_TYPES[n], tmp_path / f"{n}.gguf") for n in ("Q4_K_M", "Q8_0")]
    with pytest.raises(Cancelled):
        quantize_model(tiny_models["tied-gqa4"], targets, report=lambda p: token.cancel(), cancel=token)
    assert list(tmp_path.iterdir()) == []


def test_cancel_while_preparing_the_kernels_leaves_no_output(tiny_models, tmp_path):
    token = CancelToken()

    def report(progress):
        assert progress.stage == "Preparing"  # nothing is read before the kernels are ready
        token.cancel()

    with pytest.raises(Cancelled):
        quantize_model(tiny_models["tied-gqa4"], [QuantizeTarget(FILE_TYPES["Q4_K_M"], tmp_path / "o.gguf")],
                       report=report, cancel=token)
    assert list(tmp_path.iterdir()) == []


def test_cancel_of_a_copy_leaves_no_output(tiny_models, tmp_path):
    # F16 -> F16 copies every tensor on the job's own thread, with no encoding to wait for
    token = CancelToken()
    with pytest.raises(Cancelled):
        quantize_model(tiny_models["tied-gqa4"], [QuantizeTarget(FILE_TYPES["F16"], tmp_path / "F16.gguf")],
                       report=lambda p: token.cancel(), cancel=token)
    assert list(tmp_path.iterdir()) == []


def test_failure_half_way_leaves_no_output_and_keeps_an_existing_file(tiny_models, tmp_path):
    (tmp_path / "Q8_0.gguf").write_bytes(b"previous")
    source = CountingSource(tiny_models["tied-gqa4"], fail_at=5)
    targets = [QuantizeTarget(FILE_TYPES[n], tmp_path / f"{n}.gguf") for n in ("Q4_K_M", "Q8_0")]
    with pytest.raises(QuantDeskError, match="could not be read"):
        quantize_model(source, targets)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Q8_0.gguf"]
    assert (tmp_path / "Q8_0.gguf").read_bytes() == b"previous"


def test_tensors_kept_as_stored_are_copied_from_the_file_and_a_file_cut_short_is_a_sentence(tiny_models, tmp_path):
    import shutil

    from quantize.gguf_layout import read_gguf_layout

    src = tmp_path / "model-F16.gguf"
    shutil.copyfile(tiny_models["tied-gqa4"], src)
    source = GGUFSource(src)
    try:  # F16 -> F16: every tensor's bytes come from the file itself (StoredBytes)
        quantize_model(source, [QuantizeTarget(FILE_TYPES["F16"], tmp_path / "copy.gguf")])
    finally:
        source.close()
    original, copied = src.read_bytes(), (tmp_path / "copy.gguf").read_bytes()
    tensors_in, tensors_out = read_gguf_layout(src).tensors, read_gguf_layout(tmp_path / "copy.gguf").tensors
    out_by_name = {t.name: t for t in tensors_out}  # written in llama.cpp's tensor order
    assert sorted(out_by_name) == sorted(t.name for t in tensors_in)
    for a in tensors_in:
        b = out_by_name[a.name]
        assert original[a.offset:a.offset + a.nbytes] == copied[b.offset:b.offset + b.nbytes], a.name

    source = GGUFSource(src)
    try:
        with open(src, "r+b") as f:  # the model changes on disk after it was opened
            f.truncate(len(original) - 5000)
        with pytest.raises(QuantDeskError, match="ended inside tensor"):
            quantize_model(source, [QuantizeTarget(FILE_TYPES["F16"], tmp_path / "cut.gguf")])
    finally:
        source.close()
    assert not (tmp_path / "cut.gguf").exists()


def test_bad_requests_are_clear_errors(tiny_models, tmp_path):
    src = tiny_models["tied-gqa4"]
    q8 = FILE_TYPES["Q8_0"]
    with pytest.raises(QuantDeskError, match="input model itself"):
        quantize_model(src, [QuantizeTarget(q8, src)])
    with pytest.raises(QuantDeskError, match="same file"):
        quantize_model(src, [QuantizeTarget(q8, tmp_path / "a.gguf"), QuantizeTarget(FILE_TYPES["Q6_K"], tmp_path / "a.gguf")])
    with pytest.raises(QuantDeskError, match="does not exist"):
        quantize_model(tmp_path / "missing.gguf", [QuantizeTarget(q8, tmp_path / "b.gguf")])
    quantize_model(src, [QuantizeTarget(q8, tmp_path / "q8.gguf")])
    with pytest.raises(QuantDeskError, match="already quantized"):
        quantize_model(tmp_path / "q8.gguf", [QuantizeTarget(FILE_TYPES["Q4_0"], tmp_path / "c.gguf")])


def test_cli_prints_the_plan_then_writes_files_of_that_size(tiny_models, tmp_path, capsys):
    src = tiny_models["untied-odd-widths"]
    assert main(["quantize", str(src), "--type", "Q4_K_M,q8_0", "-o", str(tmp_path / "out"), "--dry-run"]) == 0
    assert not (tmp_path / "out").exists()
    planned = capsys.readouterr().out
    assert main(["quantize", str(src), "--type", "Q4_K_M,q8_0", "-o", str(tmp_path / "out"),
                 "--output-tensor-type", "q8_0", "--threads", "2"]) == 0
    out = capsys.readouterr().out
    for name in ("Q4_K_M", "Q8_0"):
        path = tmp_path / "out" / f"untied-odd-widths-{name}.gguf"
        assert path.exists() and str(path) in out
        assert tensor_types(path)["output.weight"] == T.Q8_0
        recorded = Library().get(path)  # the library knows what was written, and how
        assert recorded.source == "quantized" and recorded.quant == name
    line = next(ln for ln in planned.splitlines() if ln.strip().startswith("Q8_0:"))
    assert line.split(": ")[1].split(" (")[0] in out  # the size shown before equals the size written
    assert main(["quantize", str(src), "--type", "Q4_K_XL"]) == 1
    assert "Q4_K_XL" in capsys.readouterr().err


def test_cli_lists_every_type_with_its_exact_size(tiny_models, tmp_path, capsys):
    from app.core.quantize_queue import offered_types
    from quantize.plan import format_size, plan_quantization

    src = tiny_models["tied-gqa4"]
    assert main(["quantize", str(src), "--type", "list"]) == 0
    out = capsys.readouterr().out
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("  ")]
    assert [r[0] for r in rows] == offered_types()  # largest first, i-quants beside k-quants
    source = GGUFSource(src)
    for row in rows:
        plan = plan_quantization(source, FILE_TYPES[row[0]])
        assert " ".join(row[3:5]) == format_size(plan.file_size)
        assert ("needs" in row) == bool(plan.needs_imatrix), row
    assert "quantdesk imatrix" in out and not list(tmp_path.iterdir())


def test_an_embedding_model_takes_the_grid_i_quants_as_llama_quantize_does(tiny_models, tmp_path):
    """A model marked for embeddings (``llama.pooling_type``, as an embedding GGUF is) to
    IQ3_S and IQ4_XS: llama_model_quantize's bytes, and the mark kept."""
    import gguf

    from tests.models.gguf_copy import copy_gguf

    src = copy_gguf(tiny_models["tied-gqa4"], tmp_path / "embed.gguf",
                    values={"llama.pooling_type": (gguf.GGUFValueType.UINT32, 1)})
    assert not _compare_all(src, tmp_path, [FILE_TYPES["IQ3_S"], FILE_TYPES["IQ4_XS"]])
    reader = gguf.GGUFReader(tmp_path / "ours-IQ3_S.gguf")
    assert reader.fields["llama.pooling_type"].contents() == 1
    assert "IQ3_S" in {t.tensor_type.name for t in reader.tensors}


def test_hf_folder_quantizes_like_converting_to_f16_then_llama_quantize(tmp_path):
    convert_mod = pytest.importorskip("quantize.convert", reason="a build without the converter")
    from tests.factory.checkpoints import write_tiny_checkpoint

    folder = write_tiny_checkpoint(tmp_path / "tiny-hf").path
    f16 = convert_mod.convert(folder, tmp_path / "f16.gguf", "f16")
    for name in ("Q8_0", "Q4_K_M"):
        ours = quantize_model(folder, [QuantizeTarget(FILE_TYPES[name], tmp_path / f"ours-{name}.gguf")]).outputs[0]
        assert llama_quantize(f16, tmp_path / f"ref-{name}.gguf", FILE_TYPES[name].ftype) == 0
        assert describe_differences(ours, tmp_path / f"ref-{name}.gguf") is None


# -- the real SmolLM2 weights -----------------------------------------------------------

@pytest.fixture(scope="module")
def smollm2_f16(smollm2_gguf, tmp_path_factory) -> Path:
    return write_dequantized_f16(smollm2_gguf, tmp_path_factory.mktemp("smollm2") / "SmolLM2-F16.gguf")


@pytest.fixture(scope="module")
def smollm2_quantized(smollm2_f16) -> dict[str, Path]:
    """Every type that needs no imatrix in one job: one pass."""
    folder = smollm2_f16.parent
    targets = [QuantizeTarget(ft, folder / f"ours-{ft.name}.gguf") for ft in NO_IMATRIX_TYPES]
    quantize_model(smollm2_f16, targets, QuantizeOptions(threads=2))
    return {t.file_type.name: t.path for t in targets}


@pytest.mark.smollm2
@pytest.mark.slow
def test_smollm2_every_file_type_matches_llama_model_quantize(smollm2_f16, smollm2_quantized):
    from quantize.plan import plan_quantization

    failures = []
    for ft in NO_IMATRIX_TYPES:
        planned = plan_quantization(GGUFSource(smollm2_f16), ft).file_size
        assert planned == smollm2_quantized[ft.name].stat().st_size, ft.name
        ref = smollm2_f16.parent / f"llama-{ft.name}.gguf"
        assert llama_quantize(smollm2_f16, ref, ft.ftype) == 0
        problem = describe_differences(smollm2_quantized[ft.name], ref)
        ref.unlink()
        if problem:
            failures.append(f"{ft.name}: {problem}")
    assert not failures, "\n".join(failures)
    q4km = tensor_types(smollm2_quantized["Q4_K_M"])
    assert q4km["token_embd.weight"] == T.Q8_0  # tied embedding, 576 wide: not a multiple of 256
    assert q4km["blk.0.ffn_down.weight"] == T.Q6_K and q4km["blk.0.attn_q.weight"] == T.Q5_0


AGREEMENT = r"""
import json, sys
import llama_cpp
import numpy as np
# A chat turn read teacher-forced: at each position, the token each model ranks first.
TEXT = ("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
        "The capital of France is Paris. It is known for the Eiffel Tower and the Louvre museum.")
def top_tokens(path):
    llm = llama_cpp.Llama(model_path=path, n_ctx=256, n_threads=2, verbose=False, logits_all=True)
    tokens = llm.tokenize(TEXT.encode(), add_bos=False, special=True)
    llm.eval(tokens)
    top = np.asarray(llm.scores[:len(tokens)]).argmax(axis=1)
    reply = llm.create_chat_completion(
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=8, temperature=0.0)["choices"][0]["message"]["content"]
    del llm
    return top, reply
reference, _ = top_tokens(sys.argv[1])
out = {}
for path in sys.argv[2:]:
    top, reply = top_tokens(path)
    out[path] = [float((top == reference).mean()), reply]
print(json.dumps(out))
"""


@pytest.mark.smollm2
@pytest.mark.slow
def test_smollm2_quantized_files_load_and_generate(smollm2_f16, smollm2_quantized):
    """Our quantized files load in llama.cpp, write text, and rank tokens as the F16 does.

    Not "the greedy answer says Paris": a 135M model's greedy reply flips with the CPU
    kernels llama.cpp was built with (the source Q4_1 itself answers otherwise on a
    machine without AVX-512), while the per-position top token of a teacher-forced turn
    is a stable measure of how much the quantization changed the model.
    """
    paths = [str(smollm2_quantized[n]) for n in ("Q8_0", "Q4_K_M", "Q3_K_S")]
    result = subprocess.run([sys.executable, "-c", AGREEMENT, str(smollm2_f16), *paths],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    agreement = json.loads(result.stdout.strip().splitlines()[-1])
    assert all(reply.strip() for _, reply in agreement.values()), agreement
    assert agreement[paths[0]][0] >= 0.9, agreement   # Q8_0: measured 1.0
    assert agreement[paths[1]][0] >= 0.7, agreement   # Q4_K_M
    assert agreement[paths[2]][0] >= 0.5, agreement   # Q3_K_S


def test_outputs_get_the_permissions_a_normal_file_gets(tiny_models, tmp_path):
    (tmp_path / "plain").write_bytes(b"")
    out = quantize_model(tiny_models["tied-gqa4"], [QuantizeTarget(FILE_TYPES["Q8_0"], tmp_path / "q.gguf")]).outputs[0]
    assert out.stat().st_mode == (tmp_path / "plain").stat().st_mode


@pytest.mark.smollm2
def test_fast_header_reader_agrees_with_gguf_reader(smollm2_gguf):
    from gguf import GGUFReader

    from quantize.gguf_layout import read_gguf_layout

    layout, reader = read_gguf_layout(smollm2_gguf), GGUFReader(smollm2_gguf)
    theirs = [(f.name, f.types[0], f.types[-1] if len(f.types) > 1 else None, f.contents())
              for f in reader.fields.values() if not f.name.startswith("GGUF.")]
    assert [(e.key, e.type, e.sub_type, e.value) for e in layout.metadata] == theirs
    assert [(t.name, t.shape, t.qtype, t.offset, t.nbytes) for t in layout.tensors] == [
        (t.name, tuple(int(d) for d in reversed(t.shape.tolist())), T(t.tensor_type), t.data_offset, t.n_bytes)
        for t in reader.tensors]
