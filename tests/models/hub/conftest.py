"""A fake Hub on 127.0.0.1 with a few repos, and the environment pointing the real client at it."""

from __future__ import annotations

import os

import pytest

from tests.models.hub_server import HubFile, HubRepo, HubServer, HubState

GATED_TOKEN = "hf_test_allowed_token"


def blob(seed: int, size: int) -> bytes:
    """Deterministic, incompressible bytes."""
    import numpy as np

    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


def make_state() -> HubState:
    state = HubState()
    state.add_repo(HubRepo(
        "acme/tiny-GGUF",
        {
            "README.md": HubFile(b"# tiny\n"),
            "tiny-Q4_K_M.gguf": HubFile(blob(1, 300_000)),
            "tiny.Q8_0.gguf": HubFile(blob(2, 500_000)),
            "Q6_K/tiny-Q6_K-00001-of-00002.gguf": HubFile(blob(3, 200_000)),
            "Q6_K/tiny-Q6_K-00002-of-00002.gguf": HubFile(blob(4, 150_000)),
            # In a folder of its own: no variant's folder is in it, so none is paired with
            # it (llama.cpp's rule), and the variants download alone.
            "vision/mmproj-tiny-F16.gguf": HubFile(blob(5, 50_000)),
        },
        downloads=500, likes=7, last_modified="2025-03-01T10:00:00.000Z",
        tags=["gguf", "license:apache-2.0", "text-generation"],
    ))
    state.add_repo(HubRepo(
        "acme/tiny-hf",
        {
            "config.json": HubFile(b'{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}'),
            "tokenizer.json": HubFile(b'{"model": {}}'),
            "tokenizer_config.json": HubFile(b'{"chat_template": "x"}'),
            "model.safetensors": HubFile(blob(6, 120_000)),
            "README.md": HubFile(b"# hf\n"),
        },
        downloads=900, likes=2, last_modified="2024-12-01T00:00:00.000Z",
        tags=["safetensors", "transformers", "license:mit"],
        config={"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
    ))
    state.add_repo(HubRepo(
        "meta/gated-GGUF", {"gated-Q4_0.gguf": HubFile(blob(7, 80_000))},
        downloads=100, likes=50, last_modified="2025-06-01T00:00:00.000Z",
        tags=["gguf", "license:llama3"], gated="manual",
    ))
    state.add_repo(HubRepo(
        "acme/private-GGUF", {"p-Q4_0.gguf": HubFile(blob(8, 20_000))}, tags=["gguf"], private=True,
    ))
    state.tokens[GATED_TOKEN] = {"meta/gated-GGUF", "acme/private-GGUF"}
    return state


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path):
    """The running fake Hub; HF_ENDPOINT, HF_HUB_DISABLE_XET and HF_HOME point at it/tmp."""
    with HubServer(make_state()) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield server


def hub_env(server) -> dict:
    """Environment for a child process that talks to ``server``."""
    env = dict(os.environ)
    env.update(HF_ENDPOINT=server.url, HF_HUB_DISABLE_XET="1")
    env.pop("HF_TOKEN", None)
    return env
