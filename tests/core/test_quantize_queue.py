"""The Quantize page's Qt-free core: output names, exact planned sizes, the job queue, ETA."""

from pathlib import Path

import pytest

from models.foundation.errors import QuantDeskError
from app.core.quantize_queue import (
    DEFAULT_PATTERN, TYPE_ORDER, QuantizeQueue, QuantizeRequest, eta_text, inspect_input, offered_types, output_path,
    run_quantize,
)
from models.memory_fit import FitVerdict
from quantize.ftypes import FILE_TYPES
from tests.factory.checkpoints import write_tiny_checkpoint


def _fits(header, settings):
    return FitVerdict("fits", None, 1 << 34, None, "needs little")


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("ck") / "tiny-hf").path


def test_output_names_follow_llama_cpp_and_the_cli(tmp_path):
    from app.commands.quantize import default_output

    folder = tmp_path / "SmolLM2"
    folder.mkdir()
    gguf = tmp_path / "model-F16.gguf"
    gguf.write_bytes(b"")
    assert output_path(folder, "Q4_K_M") == folder / "SmolLM2-Q4_K_M.gguf" == default_output(folder, "Q4_K_M")
    assert output_path(gguf, "Q8_0") == tmp_path / "model-Q8_0.gguf" == default_output(gguf, "Q8_0")
    assert output_path(gguf, "Q8_0", tmp_path / "out", "{type}.{name}") == tmp_path / "out" / "Q8_0.model.gguf"
    for bad in ("{name}.gguf", "{name}/{type}.gguf", "{oops}-{type}.gguf"):
        with pytest.raises(QuantDeskError):
            output_path(gguf, "Q8_0", None, bad)


def test_inspect_input_gives_exact_sizes_before_any_work(tiny_hf):
    from quantize.ftypes import parse_file_type
    from quantize.job import QuantizeOptions, QuantizeTarget, open_source, plan_targets

    facts = inspect_input(tiny_hf / "model.safetensors", judge=_fits)  # a .safetensors file means its folder
    assert facts.path == tiny_hf
    assert [r.name for r in facts.rows] == offered_types()
    assert offered_types() == [n for n in TYPE_ORDER if n in FILE_TYPES]  # the page's order
    assert set(offered_types()) == set(FILE_TYPES)  # every type the quantizer writes
    source = open_source(tiny_hf)
    plans = plan_targets(source, [QuantizeTarget(parse_file_type(n), Path(n)) for n in offered_types()],
                         QuantizeOptions())
    source.close()
    for row, plan in zip(facts.rows, plans):
        assert (row.file_size, row.bits_per_weight) == (plan.file_size, plan.bits_per_weight)
        assert row.needs_imatrix == bool(plan.needs_imatrix)
        assert row.text.startswith(f"{row.name} ") and "bpw" in row.text and row.fit == "fits"
    assert facts.architecture == "llama" and facts.tokenizer == "gpt2" and facts.parameters > 0


def test_pickle_only_folder_gets_the_core_sentence(tmp_path):
    folder = tmp_path / "pickled"
    folder.mkdir()
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04\x95")
    with pytest.raises(QuantDeskError, match="pickle"):
        inspect_input(folder, judge=_fits)


def test_run_quantize_writes_and_records_in_the_library(tiny_hf, tmp_path):
    from models.library import Library

    request = QuantizeRequest(tiny_hf, ["Q8_0"], folder=tmp_path / "out", pattern=DEFAULT_PATTERN)
    result = run_quantize(request)
    assert result.outputs == [tmp_path / "out" / "tiny-hf-Q8_0.gguf"]
    row = Library().get(result.outputs[0])
    assert row is not None and row.source == "quantized" and row.quant == "Q8_0"


def test_queue_runs_one_job_at_a_time_and_refuses_a_busy_input(tmp_path):
    queue = QuantizeQueue()
    first = queue.add(QuantizeRequest(tmp_path / "a", ["Q4_K_M"]))
    with pytest.raises(QuantDeskError, match="already being quantized"):
        queue.add(QuantizeRequest(tmp_path / "a", ["Q8_0"]))
    second = queue.add(QuantizeRequest(tmp_path / "b", ["Q8_0"]))
    assert queue.next_to_run() is first and queue.next_to_run() is None
    assert queue.is_busy(tmp_path / "a") and queue.is_busy(tmp_path / "b")
    queue.finish(first, "done")
    assert not queue.is_busy(tmp_path / "a")
    assert queue.next_to_run() is second and second.state == "running"


def test_eta_text():
    assert eta_text(100.0, 0.25, now=110.0) == "ETA 0:30"
    assert eta_text(100.0, None, now=110.0) == "ETA --:--"
    assert eta_text(0.0, 0.5, now=130.0) == "ETA 2:10"
    assert eta_text(0.0, 0.005, now=2.0) == "ETA --:--"  # the first small tensor: no wild guess
    assert eta_text(0.0, 0.5, now=0.5) == "ETA --:--"
