"""A Hub that refuses connections, or that is slow, through the real client: one attempt and a
sentence, cancelled requests that stop while they wait, and a shared client that stays usable."""

from __future__ import annotations

import logging
import socket
import threading
from pathlib import Path

import pytest

from models.foundation.errors import Cancelled, QuantDeskError
from models.foundation.jobs import CancelToken
from models.hub.details import model_details
from models.hub.search import search_models
from models.hub.transfer import RemoteFile, RetryPolicy, fetch_file, part_path
from tests.models.hub.conftest import make_state
from tests.models.hub_server import HubServer

HELD = 600.0  # an /api answer held this long (the server lets go when it stops)


def free_port() -> int:
    """A port nobody listens on (connections to it are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def in_thread(fn):
    """Run ``fn`` in a thread; return the thread and a dict that gets ``result`` or ``error``."""
    out: dict = {}

    def run() -> None:
        try:
            out["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 (the test looks at what it was)
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def wait_for(condition, what: str) -> None:
    """Until ``condition()`` holds (bounded far above what it should take)."""
    done = threading.Event()
    for _ in range(600):
        if condition():
            return
        done.wait(0.05)
    raise AssertionError(f"never happened: {what}")


def hf_retries(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "Retrying in" in r.getMessage()]


def test_a_refused_connection_is_one_attempt_and_a_sentence(monkeypatch, caplog):
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    caplog.set_level(logging.WARNING, logger="huggingface_hub")
    with pytest.raises(QuantDeskError, match="could not reach the Hub"):
        search_models("tiny")
    with pytest.raises(QuantDeskError, match="could not reach the Hub"):
        model_details("acme/tiny-GGUF")
    assert hf_retries(caplog) == []  # huggingface_hub's backoff (5 retries, ~23 s) was not run


def test_the_next_search_works_when_the_hub_comes_back_on_the_same_port(monkeypatch, tmp_path):
    from huggingface_hub.utils import get_session

    port = free_port()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    client = get_session()
    with pytest.raises(QuantDeskError, match="could not reach the Hub"):
        search_models("tiny")
    with HubServer(make_state(), port=port):
        assert [m.repo_id for m in search_models("tiny").results] == ["acme/tiny-GGUF"]
        assert model_details("acme/tiny-GGUF").default_variant().quant == "Q4_K_M"
    assert get_session() is client  # the refused connection closed nothing


def test_a_refused_search_leaves_a_download_beside_it_intact(hub, monkeypatch):
    """huggingface_hub closes its shared client on a refused connection; requests other
    threads are running on it then fail ("Bad file descriptor"). Not any more."""
    from huggingface_hub.utils import get_session

    repo = hub.state.repos["acme/tiny-GGUF"]
    expected = repo.files["tiny.Q8_0.gguf"].read()
    with get_session().stream("GET", f"{hub.url}/acme/tiny-GGUF/resolve/main/tiny.Q8_0.gguf") as response:
        pieces = response.iter_raw(4096)
        got = [next(pieces)]  # the download is under way on the shared client
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
        with pytest.raises(QuantDeskError, match="could not reach the Hub"):
            search_models("tiny")
        got.extend(pieces)
    assert b"".join(got) == expected
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    assert [m.repo_id for m in search_models("tiny").results] == ["acme/tiny-GGUF"]


@pytest.mark.parametrize("ask", [
    lambda cancel: search_models("tiny", cancel=cancel),
    lambda cancel: model_details("acme/tiny-GGUF", cancel=cancel),
], ids=["search", "details"])
def test_a_cancelled_request_stops_while_the_hub_is_silent(hub, ask):
    search_models("tiny")  # a kept-alive connection: the held request reuses it
    hub.state.faults.api_delay = HELD
    asked = len(hub.state.requests)
    cancel = CancelToken()
    thread, out = in_thread(lambda: ask(cancel))
    wait_for(lambda: len(hub.state.requests) > asked, "the request reached the Hub")
    assert hub.state.requests[-1]["path"] in ("/api/models", "/api/models/acme/tiny-GGUF")
    cancel.cancel()
    thread.join(60)  # the Hub holds its answer for HELD s: only the cancel ends this
    assert not thread.is_alive() and isinstance(out.get("error"), Cancelled)
    hub.state.faults.api_delay = 0.0
    assert [m.repo_id for m in search_models("tiny").results] == ["acme/tiny-GGUF"]


def test_open_timeouts_get_limits_and_a_cancellable_read_keeps_its_own(hub, monkeypatch):
    import httpx2
    from huggingface_hub.utils import get_session

    from models.hub import session

    hub.state.faults.api_delay = HELD
    url = f"{hub.url}/api/models"
    monkeypatch.setattr(session, "TIMEOUT", httpx2.Timeout(0.3))
    with pytest.raises(httpx2.ReadTimeout):
        get_session().get(url, timeout=None)  # what huggingface_hub passes: no limit
    with session.cancellable(CancelToken()), pytest.raises(httpx2.ReadTimeout):
        get_session().get(url, timeout=0.5)  # read in slices, but the caller's limit holds


def test_a_cancelled_token_sends_nothing(hub):
    cancel = CancelToken()
    cancel.cancel()
    with pytest.raises(Cancelled):
        search_models("tiny", cancel=cancel)
    with pytest.raises(Cancelled):
        model_details("acme/tiny-GGUF", cancel=cancel)
    assert hub.state.requests == []


def test_pausing_a_stalled_download_stops_at_once_and_keeps_the_bytes(hub, tmp_path):
    repo = hub.state.repos["acme/tiny-GGUF"]
    f = repo.files["tiny.Q8_0.gguf"]
    hub.state.faults.stall_after["tiny.Q8_0.gguf"] = 100_000
    remote = RemoteFile("acme/tiny-GGUF", repo.sha, "tiny.Q8_0.gguf", f.size, f.sha256, f.git_sha1)
    target = Path(tmp_path, "tiny.Q8_0.gguf")
    arrived: list[int] = []
    cancel = CancelToken()
    policy = RetryPolicy(read_timeout=HELD)  # only the cancel can end the silent read
    thread, out = in_thread(lambda: fetch_file(remote, target, None, arrived.append, cancel, policy))
    part = part_path(target)
    wait_for(lambda: part.exists() and part.stat().st_size > 0, "the first bytes arrived")
    cancel.cancel()
    thread.join(60)
    assert not thread.is_alive() and isinstance(out.get("error"), Cancelled)
    assert 0 < part.stat().st_size == sum(arrived) <= 100_000 and not target.exists()


def test_a_download_from_a_refused_hub_retries_with_its_own_backoff_and_stops_on_cancel(monkeypatch, tmp_path,
                                                                                          caplog):
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    caplog.set_level(logging.WARNING, logger="huggingface_hub")
    remote = RemoteFile("acme/tiny-GGUF", "0" * 40, "tiny.Q8_0.gguf", 10, "a" * 64, "b" * 40)
    cancel = CancelToken()
    retries: list[str] = []

    def on_retry(reason: str, wait: float) -> None:
        retries.append(reason)
        cancel.cancel()  # the user pauses during the backoff

    policy = RetryPolicy(max_failures=8, base_wait=HELD, max_wait=HELD)
    thread, out = in_thread(lambda: fetch_file(remote, tmp_path / "x.gguf", None, None, cancel, policy, on_retry))
    thread.join(60)  # the backoff is HELD s long: only the cancel ends it
    assert not thread.is_alive() and isinstance(out.get("error"), Cancelled)
    assert len(retries) == 1 and "could not reach the Hub" in retries[0]
    assert hf_retries(caplog) == []
