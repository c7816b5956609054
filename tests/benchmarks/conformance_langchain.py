"""Third-party conformance: langchain-tests' chat model integration suite through
``langchain-openai``'s ``ChatOpenAI`` pointed at ``quantdesk serve`` with SmolLM2.

Opt-in (too slow for the suite, and some of its tests ask more of a 135M model than it
can give); needs the ``conformance`` extra (``pip install langchain-openai
langchain-tests``). Run::

    nice -n 15 python -m pytest tests/benchmarks/conformance_langchain.py \\
        -o asyncio_mode=auto -o asyncio_default_fixture_loop_scope=function -q -rA --tb=line

(pytest-asyncio, from the same extra, runs langchain-tests' async tests; the project's own
tests are synchronous, so the suite's configuration does not name its options.)

Two classes run the same suite: one over Chat Completions, one over the Responses API
(``use_responses_api=True``). The server is the real one (this process, a free port) with
the real engine; the model is the cached SmolLM2 (``tests/conftest.py``). What a failure
means is in ``tests/benchmarks/README.md`` (tests that judge the model's answer — "did it
say the tool's result", "did it call the tool unprompted" — fail with any 135M model; the
protocol tests must pass).
"""

from __future__ import annotations

import os

import pytest

langchain_openai = pytest.importorskip("langchain_openai")
integration = pytest.importorskip("langchain_tests.integration_tests")

MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
_SERVER: dict = {}


@pytest.fixture(scope="module", autouse=True)
def quantdesk_server(tmp_path_factory, smollm2_gguf):
    """The real server with SmolLM2 in a Library of its own, for the whole module."""
    from models.engine import LoadSettings
    from models.library import Library
    from models.server.config import ServerConfig
    from models.server.controller import ServerController
    from models.server.engine_pool import EnginePool

    home = tmp_path_factory.mktemp("langchain-home")
    patch = pytest.MonkeyPatch()
    patch.setenv("QUANTDESK_HOME", str(home))
    library = Library(home / "models")
    library.import_path(smollm2_gguf)
    threads = int(os.environ.get("QUANTDESK_BENCH_THREADS", "2"))
    pool = EnginePool(settings_for=lambda path: LoadSettings(
        threads=threads, batch_threads=threads, context_length=2048), parallel=2)
    server = ServerController(ServerConfig(port=0), engines=pool, library=library)
    server.start()
    _SERVER["base_url"] = f"{server.address}/v1"
    yield server
    server.stop()
    pool.close()
    patch.undo()


class TestQuantDeskChatCompletions(integration.ChatModelIntegrationTests):
    """ChatOpenAI over ``/v1/chat/completions``."""

    @property
    def chat_model_class(self):
        return langchain_openai.ChatOpenAI

    @property
    def chat_model_params(self) -> dict:
        params = {"model": MODEL_ID, "base_url": _SERVER["base_url"], "api_key": "none",
                  "timeout": 900, "max_retries": 0, "stream_usage": True}
        if os.environ.get("QUANTDESK_CONFORMANCE_MAX_TOKENS"):  # shorter replies, faster
            params["max_tokens"] = int(os.environ["QUANTDESK_CONFORMANCE_MAX_TOKENS"])
        return params

    @property
    def has_tool_calling(self) -> bool:
        return True

    @property
    def has_tool_choice(self) -> bool:
        return True

    @property
    def has_structured_output(self) -> bool:
        return True

    @property
    def supports_json_mode(self) -> bool:
        return True

    @property
    def returns_usage_metadata(self) -> bool:
        return True

    @property
    def supports_image_inputs(self) -> bool:
        return False


class TestQuantDeskResponses(TestQuantDeskChatCompletions):
    """ChatOpenAI over ``/v1/responses``."""

    @property
    def chat_model_params(self) -> dict:
        return dict(super().chat_model_params, use_responses_api=True)

    @property
    def supports_json_mode(self) -> bool:
        return False  # json_object is a Chat Completions format
