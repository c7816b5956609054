"""The server's parts that need no engine: the key file, the safety rules, body parsing,
the queue's order."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from pathlib import Path

import pytest

from app.core.errors import QuantDeskError
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
