"""Where a model runs and the memory it takes, in words, from llama.cpp's load log."""

from __future__ import annotations

from models.engine.llama_log import parse_offload_report

CPU_ONLY = """\
load_tensors: offloaded 0/31 layers to GPU
load_tensors:   CPU_Mapped model buffer size =    92.06 MiB
llama_kv_cache:        CPU KV buffer size =    90.00 MiB
llama_context:        CPU  output buffer size =     0.19 MiB
llama_context:        CPU compute buffer size =    99.38 MiB
"""

CUDA_PART = """\
load_tensors: offloaded 20/33 layers to GPU
load_tensors:   CPU_Mapped model buffer size =  1500.00 MiB
load_tensors:        CUDA0 model buffer size =  2400.00 MiB
llama_kv_cache:      CUDA0 KV buffer size =   600.00 MiB
llama_kv_cache:        CPU KV buffer size =   200.00 MiB
llama_context:  CUDA_Host  output buffer size =     0.50 MiB
llama_context:      CUDA0 compute buffer size =   300.00 MiB
llama_context:  CUDA_Host compute buffer size =    20.00 MiB
"""


def test_a_cpu_load_reads_as_cpu_and_memory():
    report = parse_offload_report(CPU_ONLY.splitlines())
    assert report.where() == "on the CPU"
    assert report.memory_words() == "282 MiB of memory"


def test_a_gpu_load_names_the_gpu_and_both_memories():
    report = parse_offload_report(CUDA_PART.splitlines())
    assert report.where() == "on the GPU (CUDA0) for 20 of 33 layers, the rest on the CPU"
    assert report.memory_mib() == {"RAM": 1720.5, "GPU": 3300.0}
    assert report.memory_words() == "3.2 GiB of GPU memory and 1.7 GiB of RAM"
    whole = parse_offload_report(CUDA_PART.replace("20/33", "33/33").splitlines())
    assert whole.where() == "on the GPU (CUDA0)"
    # llama.cpp's per-layer lines of one GPU and the CPU still read as the sentence above.
    assigned = [f"load_tensors: layer {n:3d} assigned to device {'CPU' if n < 13 else 'CUDA0'}, "
                "is_swa = 0" for n in range(33)]
    report = parse_offload_report(CUDA_PART.splitlines() + assigned)
    assert report.layers_by_device == {"CPU": 13, "CUDA0": 20}
    assert report.where() == "on the GPU (CUDA0) for 20 of 33 layers, the rest on the CPU"
    assigned = [line.replace("CPU,", "CUDA1,") for line in assigned]
    assert parse_offload_report(CUDA_PART.splitlines() + assigned).where() == \
        "with its layers split: CUDA1 13, CUDA0 20"


def test_layers_on_several_devices_are_listed_and_remote_memory_named():
    lines = CPU_ONLY.splitlines() + [
        "load_tensors: layer   0 assigned to device CPU, is_swa = 0",
        "load_tensors: layer   1 assigned to device RPC0, is_swa = 0",
        "load_tensors: RPC0[127.0.0.1:50052] model buffer size =    40.00 MiB",
    ]
    report = parse_offload_report(lines)
    report.device_labels["RPC0"] = "127.0.0.1:50052"
    assert report.where() == "with its layers split: CPU 1, RPC0 (127.0.0.1:50052) 1"
    assert report.memory_words() == "40 MiB on other computers and 282 MiB of RAM"


def test_no_buffers_say_nothing_about_memory():
    assert parse_offload_report([]).memory_words() == ""
