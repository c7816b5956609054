"""SmolLM2 split across this computer's CPU and two workers, with the real engine.

The workers are real ``quantdesk worker`` processes (llama.cpp's RPC server from the
wheel's ``libggml-rpc``), each in a network namespace of its own where root and ``ip
netns`` allow (two more "computers" on a link), else on loopback. Shown here:

- a greedy reply split across CPU + two workers equals the reply on the CPU alone, token
  for token, and the load report says where the layers went, as memory_fit predicted;
- a worker killed mid-reply gives a sentence naming it, keeps the partial reply, and the
  next load on this computer alone works;
- a worker of another llama.cpp build (the RPC server compiled with the next protocol
  version) and one that cannot be reached are refused with sentences before the engine
  starts (llama.cpp's own client would abort the process on either).
"""

from __future__ import annotations

import pytest

from models.engine import ChatOptions, EngineClient, EngineCrashed, LoadSettings
from models.foundation.errors import QuantDeskError
from models.rpc.devices import rpc_available
from tests.models.rpc_hosts import (Worker, free_port, netns_available, other_protocol_server,
                                    workers_on_hosts)

pytestmark = [pytest.mark.smollm2, pytest.mark.skipif(
    not rpc_available(), reason="this llama.cpp was built without GGML_RPC (packaging/install.sh "
                                "builds it with RPC)")]

QUESTION = [{"role": "user", "content": "Name three colours of the rainbow, then count to five."}]
GREEDY = ChatOptions(temperature=0.0, max_tokens=48)
LOCAL = LoadSettings(threads=2, batch_threads=2, context_length=512, gpu_layers=0)


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    """Two workers, as separate hosts when namespaces can be made."""
    with workers_on_hosts(tmp_path_factory.mktemp("workers"), 2, netns_available() is None) as workers:
        yield workers


def test_split_reply_equals_the_local_reply(smollm2_gguf, two_workers):
    from models.memory_fit import FitSettings, device_shares

    remote = tuple(w.address for w in two_workers)
    split = LoadSettings(threads=2, batch_threads=2, context_length=512, gpu_layers=20,
                         remote_devices=remote, device_split=(1, 1))
    with EngineClient() as client:
        client.load(smollm2_gguf, LOCAL)
        local = client.chat(QUESTION, GREEDY).wait()
        report = client.load(smollm2_gguf, split)
        assert client.remote_endpoints == list(remote)
        spread = client.chat(QUESTION, GREEDY).wait()
    assert spread.stats.completion_tokens == local.stats.completion_tokens > 10
    assert spread.text == local.text

    # Where the layers went: 11 of the 31 on this CPU (10 blocks and the one... the first
    # 11 layers), then two runs of 10, the output layer last, as memory_fit predicts.
    offload = report.offload
    assert offload.layers_by_device == {"CPU": 11, "RPC0": 10, "RPC1": 10}
    assert offload.device_labels == {"RPC0": remote[0], "RPC1": remote[1]}
    assert f"with its layers split: CPU 11, RPC0 ({remote[0]}) 10" in report.summary()
    assert "on other computers" in report.summary()
    assert "layers by device" in report.details()
    shares = device_shares(smollm2_gguf, FitSettings(n_ctx=512, n_gpu_layers=20),
                           [(remote[0], 1), (remote[1], 1)])
    assert [s.layers for s in shares] == [11, 10, 10]
    for index, share in enumerate(shares[1:]):
        measured = offload.buffers[("model", f"RPC0[{remote[index]}]")] * 2**20
        assert abs(measured - share.weights) <= 0.02 * share.weights, (index, measured, share)
        kv = offload.buffers[("KV", f"RPC0[{remote[index]}]")] * 2**20
        assert abs(kv - share.kv) <= 0.02 * share.kv, (index, kv, share)
    # A network address (not loopback) makes the worker say that anyone can use it.
    if two_workers[0].host is not None:
        assert "no password and no encryption" in two_workers[0].output()
    assert "RPC protocol 7.0.0" in two_workers[0].output()


def test_a_worker_killed_mid_reply_is_named_and_the_next_local_load_works(smollm2_gguf, tmp_path):
    worker = Worker(tmp_path / "victim")
    try:
        settings = LoadSettings(threads=2, batch_threads=2, context_length=512, gpu_layers=15,
                                remote_devices=(worker.address,))
        with EngineClient() as client:
            client.load(smollm2_gguf, settings)
            reply = client.chat(QUESTION, ChatOptions(temperature=0.0, max_tokens=300,
                                                      ignore_eos=True))
            streamed = []
            with pytest.raises(EngineCrashed) as info:
                for delta in reply:
                    streamed.append(delta)
                    if len(streamed) == 3:
                        worker.kill()
            crash = info.value
            assert f"the worker {worker.address} stopped answering" in crash.what
            assert "reply so far" in crash.what and "without that remote device" in crash.fix
            assert crash.partial_text == "".join(streamed) == reply.text != ""
            assert client.pid is None  # llama.cpp aborted the engine process, not this one
            # Sending again reloads with the same settings: the worker is gone, a sentence.
            with pytest.raises(QuantDeskError, match=f"worker {worker.address} could not be reached"):
                client.chat(QUESTION, GREEDY).wait()
            client.load(smollm2_gguf, LOCAL)
            assert client.chat(QUESTION, GREEDY).wait().stats.completion_tokens > 10
    finally:
        worker.stop()


def test_a_worker_of_another_build_and_an_unreachable_one_are_refused(smollm2_gguf, tmp_path):
    try:
        program = other_protocol_server()
    except (RuntimeError, OSError) as exc:
        pytest.skip(f"no RPC server of another protocol version can be built here: {exc}")
    other = Worker(tmp_path / "other", program=[str(program)])
    nobody = f"127.0.0.1:{free_port()}"
    try:
        with EngineClient() as client:
            with pytest.raises(QuantDeskError) as info:
                client.load(smollm2_gguf, LoadSettings(gpu_layers=10, remote_devices=(other.address,)))
            assert f"The worker {other.address} is another build of llama.cpp" in info.value.what
            assert "protocol 8.0.0" in info.value.what and "same QuantDesk version" in info.value.fix
            with pytest.raises(QuantDeskError, match=f"The worker {nobody} could not be reached"):
                client.load(smollm2_gguf, LoadSettings(gpu_layers=10, remote_devices=(nobody,)))
            assert client.processes_started == 0  # refused before llama.cpp could abort
            client.load(smollm2_gguf, LOCAL)
            assert client.chat(QUESTION, GREEDY).wait().text
    finally:
        other.stop()
