"""One API server with SmolLM2 per test module: the real server on 127.0.0.1 (a free
port), the real engine, a Library of its own holding the model."""

from __future__ import annotations

import pytest

from tests.models.conftest import FAST_SETTINGS

MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"


@pytest.fixture(scope="module")
def server_home(tmp_path_factory):
    """A QuantDesk home for the module's server (the per-test home changes under it)."""
    home = tmp_path_factory.mktemp("server-home")
    patch = pytest.MonkeyPatch()
    patch.setenv("QUANTDESK_HOME", str(home))
    yield home
    patch.undo()


def library_of(home, *models):
    """A Library in ``home`` holding ``models`` (GGUF paths)."""
    from models.library import Library

    library = Library(home / "models")
    for model in models:
        library.import_path(model)
    return library


@pytest.fixture(scope="module")
def library(server_home, smollm2_gguf):
    return library_of(server_home, smollm2_gguf)


@pytest.fixture(scope="module")
def pool():
    from models.engine import LoadSettings
    from models.server.engine_pool import EnginePool

    pool = EnginePool(settings_for=lambda path: LoadSettings(**FAST_SETTINGS))
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def server(library, pool):
    """A running ServerController; its request log is collected in ``server.entries``."""
    from models.server.config import ServerConfig
    from models.server.controller import ServerController

    controller = ServerController(ServerConfig(port=0), engines=pool, library=library)
    controller.entries = []
    controller.add_listener(controller.entries.append)
    controller.start()
    yield controller
    controller.stop()


@pytest.fixture(scope="module")
def ollama_server(library, pool):
    """A running ServerController that also answers Ollama's API (``ollama_port``)."""
    from models.server.config import ServerConfig
    from models.server.controller import ServerController

    controller = ServerController(ServerConfig(port=0, ollama_port=0), engines=pool,
                                  library=library)
    controller.start()
    yield controller
    controller.stop()


@pytest.fixture
def client(server):
    import openai

    return openai.OpenAI(base_url=f"{server.address}/v1", api_key="none", max_retries=0,
                         timeout=600)  # a busy 2-core machine can be slow
