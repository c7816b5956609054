"""Remote devices without a model: the entries, the settings rules, the layer split, and
the RPC handshake against servers that are not (or not quite) workers.

The handshake's counterparts here are small socket servers written for the test, each
imitating one thing a user's network can hold: a worker of an older llama.cpp (the
protocol-3-to-6 hello), a program that is not a worker, a worker busy with another
client. Real workers, of this build and of another, are in test_rpc_split.py.
"""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from models.engine.settings import LoadSettings, validate_settings
from models.foundation.errors import QuantDeskError
from models.memory_fit import layer_devices
from models.rpc.endpoints import DEFAULT_WORKER_PORT, parse_remote_devices
from models.rpc.probe import PROTOCOL_VERSION, probe_worker, protocol_compatible


def test_entries_in_both_forms():
    direct, bare, tunnel, ports = parse_remote_devices(
        "127.0.0.1:50053, box.lan\nssh://me@gpu-box, ssh://me@gpu-box:2222/50060")
    assert (direct.host, direct.port, direct.via_ssh, direct.loopback) == ("127.0.0.1", 50053, False, True)
    assert (bare.host, bare.port, bare.loopback) == ("box.lan", DEFAULT_WORKER_PORT, False)
    assert (tunnel.ssh_destination, tunnel.port, tunnel.ssh_port, tunnel.via_ssh) == \
        ("me@gpu-box", DEFAULT_WORKER_PORT, None, True)
    assert (ports.ssh_port, ports.port) == (2222, 50060)


@pytest.mark.parametrize("entry, words", [
    ("http://box:50052", "not in a form"), ("box:99999", "not a TCP port"),
    ("ssh://me@box; rm -rf /", "not in a form"), ("-oProxyCommand=x", "not in a form")])
def test_bad_entries_are_refused_with_a_sentence(entry, words):
    with pytest.raises(QuantDeskError) as info:
        parse_remote_devices([entry])
    assert words in info.value.what and "ssh://USER@HOST" in info.value.fix


def test_an_entry_listed_twice_is_refused():
    with pytest.raises(QuantDeskError, match="listed twice"):
        parse_remote_devices("box:50052, box")


class _Header:
    """The model facts ``validate_settings`` reads (a 30-block dense model)."""

    name, block_count, max_gpu_layers, context_length = "m", 30, 31, 8192
    head_size_k, is_moe = 64, False


def test_remote_devices_count_as_gpus_for_gpu_layers():
    cpu_only = validate_settings(LoadSettings(), _Header(), gpu_count=0)
    assert cpu_only.gpu_layers == 0
    remote = validate_settings(LoadSettings(remote_devices=("127.0.0.1:50052",)), _Header(), 0)
    assert remote.gpu_layers == 31 and remote.remote_devices == ("127.0.0.1:50052",)
    some = validate_settings(LoadSettings(gpu_layers=20, remote_devices=["box"]), _Header(), 0)
    assert some.gpu_layers == 20 and some.remote_devices == ("box",)
    with pytest.raises(QuantDeskError, match="sees no GPU"):
        validate_settings(LoadSettings(gpu_layers=20), _Header(), 0)
    with pytest.raises(QuantDeskError, match="not a list of shares"):
        validate_settings(LoadSettings(remote_devices=("box",), device_split=(1, -1)), _Header(), 0)
    with pytest.raises(QuantDeskError, match="two devices"):
        validate_settings(LoadSettings(device_split=(1, 1)), _Header(), 0)
    # The settings survive the pipe and a settings file (lists back to tuples).
    again = LoadSettings.from_dict(some.to_dict() | {"remote_devices": ["box"], "device_split": [1, 2]})
    assert again.remote_devices == ("box",) and again.device_split == (1.0, 2.0)


def test_layer_split_follows_llama_cpp():
    # 20 of 31 layers offloaded: the output layer and the last 19 blocks, in two equal runs.
    placement = layer_devices(30, 20, [1, 1])
    assert placement == [-1] * 11 + [0] * 10 + [1] * 10
    # By free memory, 3 GB and 1 GB: a layer goes to the first device while its position
    # (layer ÷ 31) is below 3/4, so 24 layers there and 7 on the second.
    assert layer_devices(30, -1, [3e9, 1e9]) == [0] * 24 + [1] * 7
    assert layer_devices(30, 0, [1, 1]) == [-1] * 31


# -- the handshake against things that are not (quite) workers ------------------------

def _serve_once(handler) -> int:
    """A one-connection TCP server on loopback running ``handler(conn)``; its port."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)

    def run():
        with server:
            for _ in range(2):  # the probe may come back once (the older hello)
                try:
                    server.settimeout(10)
                    conn, _ = server.accept()
                except OSError:
                    return
                with conn:
                    handler(conn)

    threading.Thread(target=run, daemon=True).start()
    return server.getsockname()[1]


def _read_command(conn) -> tuple[int, bytes]:
    head = b""
    while len(head) < 9:
        head += conn.recv(9 - len(head))
    command, size = struct.unpack("<BQ", head)
    payload = b""
    while len(payload) < size:
        payload += conn.recv(size - len(payload))
    return command, payload


def test_a_worker_of_an_older_llama_cpp_is_named_with_its_version():
    def older_worker(conn):
        command, payload = _read_command(conn)
        if command != 14 or payload:  # protocol 3: HELLO has no input; anything else: hang up
            return
        conn.sendall(struct.pack("<Q", 3) + bytes([3, 0, 0]))

    port = _serve_once(older_worker)
    with pytest.raises(QuantDeskError) as info:
        probe_worker("127.0.0.1", port, f"127.0.0.1:{port}")
    assert "another build" in info.value.what and "protocol 3.0.0" in info.value.what
    assert f"127.0.0.1:{port}" in info.value.what


def test_a_program_that_is_not_a_worker_and_a_busy_worker():
    port = _serve_once(lambda conn: conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n"))
    with pytest.raises(QuantDeskError, match="not as a llama.cpp RPC worker"):
        probe_worker("127.0.0.1", port, "web")
    silent = threading.Event()
    port = _serve_once(lambda conn: silent.wait(5))
    with pytest.raises(QuantDeskError, match="another one may be using it"):
        probe_worker("127.0.0.1", port, "busy", timeout=0.5)
    silent.set()


def test_nobody_listening():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(QuantDeskError, match="could not be reached"):
        probe_worker("127.0.0.1", port, f"127.0.0.1:{port}")


def test_llama_cpp_version_rule():
    major, minor, _ = PROTOCOL_VERSION
    assert protocol_compatible((major, minor, 9))
    assert not protocol_compatible((major, minor + 1, 0))  # newer minor: the client refuses
    assert not protocol_compatible((major + 1, 0, 0)) and not protocol_compatible((major - 1, 0, 0))


def test_chat_bench_and_serve_take_remote_devices_the_same_way(tmp_path):
    from app.cli import build_parser
    from app.commands.engine_args import load_settings_from_args, remote_settings_from_args

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    parser = build_parser()
    for command in ("chat", "bench"):
        args = parser.parse_args([command, str(model), "--remote", "127.0.0.1:50052,ssh://me@box",
                                  "--gpu-layers", "20", "--split", "1,2"])
        settings = load_settings_from_args(args)
        assert settings.remote_devices == ("127.0.0.1:50052", "ssh://me@box")
        assert settings.device_split == (1.0, 2.0) and settings.gpu_layers == 20
    served = parser.parse_args(["serve", "--remote", "ssh://me@box"])
    assert remote_settings_from_args(served) == {"remote_devices": ("ssh://me@box",),
                                                 "device_split": ()}
    with pytest.raises(QuantDeskError, match="not a list of numbers"):
        remote_settings_from_args(parser.parse_args(["serve", "--split", "half"]))
    with pytest.raises(QuantDeskError, match="not in a form"):
        remote_settings_from_args(parser.parse_args(["serve", "--remote", "http://box"]))
