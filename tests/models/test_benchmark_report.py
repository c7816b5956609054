"""``quantdesk bench``'s bandwidth bound counts only the weights the CPU reads.

Seen on an H100 with every layer offloaded: the report compared 615 tok/s of GPU
generation with the CPU RAM's "37.6 tok/s limit" and printed "1634 %". The figures below
are that run's.
"""

from models.engine.benchmark import BenchResult, format_result


def _result(layers_on_gpu: int, layers_total: int, decode: float) -> BenchResult:
    return BenchResult(prompt_tokens=907, generated_tokens=128, prefill_tokens_per_second=19629.4,
                       decode_tokens_per_second=decode, time_to_first_token=0.12,
                       memory_bandwidth=23.7e9, weight_bytes_per_token=630_200_000,
                       layers_on_gpu=layers_on_gpu, layers_total=layers_total)


def test_every_layer_on_the_gpu_gives_no_ram_limit_and_no_percentage():
    result = _result(23, 23, 614.7)
    assert result.decode_limit is None and result.fraction_of_limit is None
    text = format_result("ck (m-Q4_K_M.gguf), 8 threads", result)
    assert "Bandwidth limit" not in text and "%" not in text
    assert "All 23 layers are on the GPU" in text and "Generation:            614.7 tok/s" in text


def test_a_split_model_is_bounded_by_the_cpu_layers_share():
    result = _result(13, 23, 80.0)
    assert result.cpu_weight_bytes_per_token == round(630_200_000 * 10 / 23)
    assert result.decode_limit == 23.7e9 / result.cpu_weight_bytes_per_token
    text = format_result("ck", result)
    assert "the 10 layers on the CPU" in text
    assert f"Generation reaches {80.0 / result.decode_limit:.0%}" in text


def test_without_offload_the_whole_model_counts_as_before():
    for on_gpu, total in ((0, 23), (0, 0)):  # CPU build, or a log without the layer line
        result = _result(on_gpu, total, 30.0)
        assert result.cpu_weight_bytes_per_token == 630_200_000
        text = format_result("ck", result)
        assert "(bandwidth ÷ weights per token)" in text
        assert f"Generation reaches {30.0 / (23.7e9 / 630_200_000):.0%}" in text



def test_a_mixture_of_experts_is_bounded_by_its_routed_experts_bytes():
    """The bytes per token given are the routed experts' (gguf_info); the report says so."""
    result = BenchResult(prompt_tokens=907, generated_tokens=128, prefill_tokens_per_second=300.0,
                         decode_tokens_per_second=20.0, time_to_first_token=0.5, memory_bandwidth=23.7e9,
                         weight_bytes_per_token=1_800_000_000, expert_count=128, expert_used_count=8)
    text = format_result("Qwen3-30B-A3B", result)
    assert "the 8 of 128 experts each token is routed to" in text
    assert result.decode_limit == 23.7e9 / 1_800_000_000
    assert "experts" not in format_result("ck", _result(0, 23, 30.0))
