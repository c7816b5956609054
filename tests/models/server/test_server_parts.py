"""The server's parts that need no engine: the key file, the safety rules, body parsing,
the queue's order."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from pathlib import Path

import pytest

from models.foundation.errors import QuantDeskError
from models.server.api_key import (api_key_path, forget_api_key, generate_api_key, load_api_key,
                                   save_api_key)
from models.server.app import allowed_host_names, host_name
from models.server.config import ServerConfig, check_exposure, is_loopback
from models.server.core import SlotGate, parse_json_object
from models.server.errors import ApiError


def test_the_key_is_stored_for_this_user_only_and_can_be_forgotten():
    assert load_api_key() is None
    key = generate_api_key()
    assert key.startswith("qd-") and len(key) > 40 and generate_api_key() != key
    path = save_api_key(key)
    assert path == api_key_path() and load_api_key() == key
    if sys.platform != "win32":
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with pytest.raises(QuantDeskError, match="spaces"):
        save_api_key("has a space")
    with pytest.raises(QuantDeskError, match="shorter"):
        save_api_key("short")
    forget_api_key()
    assert load_api_key() is None


def test_a_network_address_needs_a_key():
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.20")
    check_exposure(ServerConfig())
    with pytest.raises(QuantDeskError, match="needs an API key"):
        check_exposure(ServerConfig(host="0.0.0.0"))
    check_exposure(ServerConfig(host="0.0.0.0", api_key="a-long-enough-key"))


def test_host_names_are_read_without_their_port():
    assert host_name("localhost:8080") == "localhost"
    assert host_name("[::1]:8080") == "::1"
    assert host_name("Evil.Example") == "evil.example"
    names = allowed_host_names("127.0.0.1")
    assert {"localhost", "127.0.0.1", "::1"} <= names and "evil.example" not in names


@pytest.mark.parametrize("raw, says", [
    (b"", "empty"), (b"{", "not valid JSON"), (b"\xff\xfe{}", "UTF-8"), (b"[1, 2]", "object"),
    (b'{"temperature": NaN}', "not valid JSON"), (b"[" * 100 + b"]" * 100, "deeper"),
])
def test_bad_bodies_are_refused_with_a_sentence(raw, says):
    with pytest.raises(ApiError, match=says) as caught:
        parse_json_object(raw)
    assert caught.value.status == 400


class _Entry:
    def __init__(self) -> None:
        self.path, self.slots, self.active, self.queued = Path("m.gguf"), 1, 0, 0

    def touch(self) -> None:
        pass


def test_requests_past_the_slots_wait_in_arrival_order_and_past_the_queue_get_429():
    async def scenario() -> list:
        entry = _Entry()
        gate, order = SlotGate(entry, queue_limit=2), []
        await gate.acquire()

        async def waiter(name: str) -> None:
            await gate.acquire()
            order.append(name)
            await asyncio.sleep(0)
            gate.release()

        tasks = [asyncio.ensure_future(waiter(n)) for n in "ab"]
        await asyncio.sleep(0)
        assert entry.queued == 2
        with pytest.raises(ApiError) as caught:
            await gate.acquire()
        assert caught.value.status == 429 and caught.value.headers["Retry-After"]
        gate.release()
        await asyncio.gather(*tasks)
        assert entry.active == 0 and entry.queued == 0
        return order

    assert asyncio.run(scenario()) == ["a", "b"]


class _BookkeepingClient:
    """Stands in for EngineClient where only the pool's bookkeeping is tested (no
    generation): it records loads and shutdowns."""

    made = 0

    def __init__(self) -> None:
        type(self).made += 1
        self.last_load = None
        self.shut_down = False

    def load(self, path, settings):
        from types import SimpleNamespace

        self.last_load = SimpleNamespace(path=Path(path), context_length=settings.context_length,
                                         parallel=getattr(settings, "parallel", 1))

    def shutdown(self) -> None:
        self.shut_down = True


def test_the_pool_loads_a_model_once_unloads_it_when_idle_and_leaves_adopted_engines(tmp_path):
    from models.engine import LoadSettings
    from models.server.engine_pool import EnginePool

    served, chatted = tmp_path / "a.gguf", tmp_path / "b.gguf"
    pool = EnginePool(settings_for=lambda path: LoadSettings(context_length=512),
                      client_factory=_BookkeepingClient, check_memory=False,
                      idle_unload_seconds=60)
    made = _BookkeepingClient.made
    entry = pool.get(served)
    assert pool.get(served) is entry and _BookkeepingClient.made == made + 1
    assert entry.context_per_slot == 512 and entry.slots >= 1
    window = _BookkeepingClient()
    window.load(chatted, LoadSettings())
    pool.adopt(chatted, window)
    assert pool.get(chatted).client is window and _BookkeepingClient.made == made + 2
    assert pool.unload_idle(now=entry.last_used + 30) == []
    entry.active = 1  # a request in progress keeps it
    assert pool.unload_idle(now=entry.last_used + 61) == []
    entry.active = 0
    assert pool.unload_idle(now=entry.last_used + 61) == [served.resolve()]
    assert entry.client.shut_down and not window.shut_down
    assert [e.client for e in pool.engines()] == [window]
    pool.release(chatted)
    assert pool.engines() == [] and not window.shut_down
    # An engine replaced while it answers a request is shut down once that request ends.
    busy = pool.get(served)
    busy.active = 1
    window.load(served, LoadSettings())  # the chat now has this model open
    pool.adopt(served, window)
    assert pool.get(served).client is window and not busy.client.shut_down
    pool.unload_idle()
    assert not busy.client.shut_down
    busy.active = 0
    pool.unload_idle()
    assert busy.client.shut_down and not window.shut_down


def test_the_pool_hands_its_engine_to_a_chat_opening_the_same_model_with_the_same_settings(
        tmp_path):
    from models.engine import LoadSettings
    from models.server.engine_pool import EnginePool

    served = tmp_path / "a.gguf"
    pool = EnginePool(settings_for=lambda path: LoadSettings(context_length=512),
                      client_factory=_BookkeepingClient, check_memory=False, parallel=4,
                      idle_unload_seconds=60)
    entry = pool.get(served)
    assert pool.hand_over(tmp_path / "other.gguf", LoadSettings(context_length=512)) is None
    assert pool.hand_over(served, LoadSettings(context_length=1024)) is None  # other settings
    assert entry.owned
    client = pool.hand_over(served, LoadSettings(context_length=512))  # slots aside: same
    assert client is entry.client and not entry.owned
    assert pool.hand_over(served, LoadSettings(context_length=512)) is None  # only once
    # The chat owns it now: the pool serves with it but never unloads or shuts it down.
    assert pool.get(served).client is client
    assert pool.unload_idle(now=entry.last_used + 61) == []
    pool.release(served)
    pool.close()
    assert not client.shut_down


@pytest.mark.smollm2
def test_a_model_that_does_not_fit_is_refused_with_memory_fits_sentence(smollm2_gguf):
    from models.engine import LoadSettings
    from models.server.engine_pool import EnginePool

    def never() -> None:
        raise AssertionError("nothing may be loaded")

    pool = EnginePool(settings_for=lambda path: LoadSettings(context_length=1 << 24),
                      client_factory=never, parallel=2)
    with pytest.raises(QuantDeskError, match="would not fit in memory: it needs .* GiB"):
        pool.get(smollm2_gguf)


def test_serve_refuses_a_network_address_without_a_key(capsys):
    from app.cli import main

    assert main(["serve", "--host", "0.0.0.0", "--port", "0"]) == 1
    assert "needs an API key" in capsys.readouterr().err


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_serve_runs_in_the_foreground_until_ctrl_c():
    import signal
    import subprocess

    from tests.conftest import REPO_ROOT

    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    # SIGINT restored: a shell without job control starts background jobs with it ignored.
    process = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=env, cwd=REPO_ROOT,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        first = process.stdout.readline()
        assert "Serving the OpenAI API on http://127.0.0.1:" in first, first
        import httpx

        address = first.split(" on ")[1].split("/v1")[0]
        assert httpx.get(f"{address}/health").json() == {"status": "ok"}
        process.send_signal(signal.SIGINT)
        rest = process.communicate(timeout=60)[0]
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0 and "Stopping" in rest
    assert "GET /health | 200" in rest  # the request's log line


def test_the_servers_connections_send_small_writes_at_once():
    """A response's header and body are separate writes; with Nagle's algorithm on, the body
    waits for the client's delayed ACK (40 ms a request on a kept-alive connection). asyncio
    turns it off only on sockets made for TCP, so the listening socket must be one."""
    import socket

    from models.server.controller import _bind

    listener = _bind("127.0.0.1", 0)
    seen: list[int] = []

    async def main() -> None:
        accepted = asyncio.Event()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport):
                sock = transport.get_extra_info("socket")
                seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()
                accepted.set()

        server = await asyncio.get_running_loop().create_server(Probe, sock=listener)
        async with server:
            _reader, writer = await asyncio.open_connection(*listener.getsockname()[:2])
            await asyncio.wait_for(accepted.wait(), 10)
            writer.close()

    asyncio.run(main())
    assert seen and seen[0] != 0
