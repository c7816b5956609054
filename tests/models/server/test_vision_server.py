"""Images through the API: the real openai, anthropic and ollama clients against the server
with a tiny Gemma 3 whose mmproj lies beside it (found and loaded by the server).

The same picture and question in every dialect is the same prompt, so the greedy replies
must be the same tokens; a model without a vision encoder answers an image with a 400 that
says so, and a damaged image is a 400 naming its field.
"""

from __future__ import annotations

import base64

import httpx
import pytest

from tests.factory.images import png_bytes, sample_picture
from tests.factory.vision import model_with_and_without_projector
from tests.models.conftest import TEST_THREADS
from tests.models.server.conftest import library_of

pytest.importorskip("torch")

PICTURE = png_bytes(sample_picture())
B64 = base64.b64encode(PICTURE).decode()
DATA_URI = "data:image/png;base64," + B64
QUESTION = "What is this?"


@pytest.fixture(scope="module")
def models(server_home, tmp_path_factory):
    """The tiny Gemma 3 with its mmproj beside it, and the same text model alone."""
    return model_with_and_without_projector(tmp_path_factory.mktemp("vision-server"))


@pytest.fixture(scope="module")
def server(server_home, models):
    from models.engine import LoadSettings
    from models.server.config import ServerConfig
    from models.server.controller import ServerController
    from models.server.engine_pool import EnginePool

    pool = EnginePool(settings_for=lambda path: LoadSettings(threads=TEST_THREADS, batch_threads=TEST_THREADS,
                                                            context_length=256), parallel=2)
    controller = ServerController(ServerConfig(port=0, ollama_port=0), engines=pool,
                                  library=library_of(server_home, *models))
    controller.start()
    yield controller
    controller.stop()
    pool.close()


def test_the_same_image_in_every_dialect_gives_the_same_greedy_reply(server):
    import anthropic
    import ollama
    import openai

    oa = openai.OpenAI(base_url=f"{server.address}/v1", api_key="none", max_retries=0, timeout=600)
    chat = oa.chat.completions.create(model="gemma3", temperature=0, max_tokens=8, messages=[
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": DATA_URI}},
                                     {"type": "text", "text": QUESTION}]}])
    responses = oa.responses.create(model="gemma3", temperature=0, max_output_tokens=8, input=[
        {"role": "user", "content": [{"type": "input_image", "image_url": DATA_URI},
                                     {"type": "input_text", "text": QUESTION}]}])
    an = anthropic.Anthropic(base_url=server.address, api_key="none", max_retries=0, timeout=600)
    message = an.messages.create(model="gemma3", max_tokens=8, extra_body={"temperature": 0}, messages=[
        {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                   "data": B64}},
                                     {"type": "text", "text": QUESTION}]}])
    ol = ollama.Client(host=f"http://127.0.0.1:{server.ollama_port}", timeout=600)
    reply = ol.chat(model="gemma3", options={"temperature": 0, "num_predict": 8, "repeat_penalty": 1.0},
                    messages=[{"role": "user", "content": QUESTION, "images": [PICTURE]}])
    generated = ol.generate(model="gemma3", prompt=QUESTION, images=[B64],
                            options={"temperature": 0, "num_predict": 8, "repeat_penalty": 1.0})
    texts = [chat.choices[0].message.content, responses.output_text, message.content[0].text,
             reply.message.content, generated.response]
    assert texts[0] and texts == [texts[0]] * 5


def test_models_list_their_input_modalities(server):
    listed = httpx.get(f"{server.address}/v1/models", timeout=60).json()["data"]
    assert {m["id"]: m["input_modalities"] for m in listed} == {"gemma3": ["text", "image"],
                                                               "gemma3-text": ["text"]}
    show = httpx.post(f"http://127.0.0.1:{server.ollama_port}/api/show", json={"model": "gemma3"},
                      timeout=60).json()
    assert "vision" in show["capabilities"]


def test_an_image_to_a_model_without_vision_is_a_400_that_says_so(server):
    import openai

    oa = openai.OpenAI(base_url=f"{server.address}/v1", api_key="none", max_retries=0, timeout=600)
    with pytest.raises(openai.BadRequestError) as caught:
        oa.chat.completions.create(model="gemma3-text", max_tokens=4, messages=[
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": DATA_URI}},
                                         {"type": "text", "text": QUESTION}]}])
    assert "cannot read images" in caught.value.message


@pytest.mark.parametrize("url, words, field", [
    ("data:image/png;base64," + base64.b64encode(PICTURE[:20]).decode(), "truncated", True),
    ("data:image/png;base64,%%%", "base64", True),
    ("https://example.com/cat.png", "downloads images only when started with --allow-image-urls", True),
    ("data:image/webp;base64," + base64.b64encode(b"RIFF\x10\x00\x00\x00WEBPVP8 " + bytes(32)).decode(), "WebP",
     True),
    # The header is whole, the picture is not: only decoding finds out (in the engine).
    ("data:image/png;base64," + base64.b64encode(PICTURE[:60]).decode(), "damaged or truncated", False),
])
def test_bad_images_are_400s_with_a_sentence(server, url, words, field):
    response = httpx.post(f"{server.address}/v1/chat/completions", timeout=60, json={
        "model": "gemma3", "max_tokens": 4, "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]})
    assert response.status_code == 400
    error = response.json()["error"]
    assert words in error["message"]
    assert not field or error["param"].startswith("messages[0].content[0]")


def test_serve_model_with_mmproj_reads_images(models):
    """``quantdesk serve MODEL --mmproj FILE``: a model whose encoder lies elsewhere."""
    import os
    import signal
    import subprocess
    import sys

    from app.core.preferences import Preferences
    from tests.conftest import REPO_ROOT

    text, plain = models
    Preferences().set("default_load_settings", {"threads": TEST_THREADS, "batch_threads": TEST_THREADS,
                                                "context_length": 256})
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    process = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", str(plain), "--port", "0",
                                "--mmproj", str(text.parent / "mmproj-gemma3.gguf")],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                               cwd=REPO_ROOT, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        lines = []
        while not (lines and "Serving the OpenAI API on" in lines[-1]):
            line = process.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
        address = lines[-1].split(" on ")[1].split("/v1")[0]
        listed = httpx.get(f"{address}/v1/models", timeout=60).json()["data"]
        assert {m["id"]: m["input_modalities"] for m in listed}["gemma3-text"] == ["text", "image"]
        reply = httpx.post(f"{address}/v1/chat/completions", timeout=300, json={
            "model": "gemma3-text", "max_tokens": 4, "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": DATA_URI}}, {"type": "text", "text": QUESTION}]}]})
        assert reply.status_code == 200, reply.text
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()



def test_input_modalities_follow_the_encoder_a_model_loads_with(server_home, models):
    """Not loaded: the encoder its load settings name (the Models page's choice,
    ``--mmproj``), else the one beside it; loaded: the one it was loaded with."""
    from models.engine import LoadSettings
    from models.server.catalog import find_model
    from models.server.config import ServerConfig
    from models.server.core import ServerCore
    from models.server.engine_pool import EnginePool

    text, plain = models
    encoder = str(text.parent / "mmproj-gemma3.gguf")
    chosen = {plain: encoder}
    pool = EnginePool(settings_for=lambda path: LoadSettings(
        threads=TEST_THREADS, batch_threads=TEST_THREADS, context_length=256, mmproj=chosen.get(path)))
    library = library_of(server_home, *models)
    core = ServerCore(ServerConfig(port=0), pool, library)
    try:
        assert core.input_modalities(find_model(library, "gemma3-text")) == ["text", "image"]
        assert core.input_modalities(find_model(library, "gemma3")) == ["text", "image"]  # beside it
        chosen.clear()
        assert core.input_modalities(find_model(library, "gemma3-text")) == ["text"]
        chosen[plain] = encoder
        pool.get(plain)
        chosen.clear()  # what it was loaded with counts now
        assert core.input_modalities(find_model(library, "gemma3-text")) == ["text", "image"]
    finally:
        pool.close()


def test_image_urls_are_downloaded_only_when_allowed_and_within_limits(server_home, models, monkeypatch):
    """``--allow-image-urls``: an http(s) picture is fetched (and answers as its data would),
    within the size limit, following redirects to http(s) only."""
    import http.server
    import threading

    from models.engine import LoadSettings
    from models.server.config import ServerConfig
    from models.server.controller import ServerController
    from models.server.engine_pool import EnginePool

    class Pictures(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path == "/cat.png":
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.end_headers()
                self.wfile.write(PICTURE)
            elif self.path == "/to-file":
                self.send_response(302)
                self.send_header("Location", "file:///etc/passwd")
                self.end_headers()
            else:
                self.send_error(404)

        def log_message(self, *args):
            pass

    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pictures)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{web.server_address[1]}"
    pool = EnginePool(settings_for=lambda path: LoadSettings(threads=TEST_THREADS, batch_threads=TEST_THREADS,
                                                            context_length=256))
    controller = ServerController(ServerConfig(port=0, image_urls=True), engines=pool,
                                  library=library_of(server_home, *models))
    controller.start()

    def ask(url):
        return httpx.post(f"{controller.address}/v1/chat/completions", timeout=300, json={
            "model": "gemma3", "max_tokens": 4, "temperature": 0, "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": QUESTION}]}]})

    try:
        by_url, by_data = ask(f"{base}/cat.png"), ask(DATA_URI)
        assert by_url.status_code == 200, by_url.text
        assert by_url.json()["choices"][0]["message"]["content"] == \
            by_data.json()["choices"][0]["message"]["content"]
        missing = ask(f"{base}/nothing.png")
        assert missing.status_code == 400 and "could not be downloaded" in missing.json()["error"]["message"]
        redirected = ask(f"{base}/to-file")
        assert redirected.status_code == 400 and "could not be downloaded" in redirected.json()["error"]["message"]
        monkeypatch.setattr("models.server.images.MAX_IMAGE_BYTES", 100)
        big = ask(f"{base}/cat.png")
        assert big.status_code == 400 and "larger than" in big.json()["error"]["message"]
    finally:
        controller.stop()
        pool.close()
        web.shutdown()


def test_a_remembered_encoder_that_moved_is_found_again_beside_the_model(models):
    from models.engine import LoadSettings
    from models.server.engine_pool import EnginePool

    text, _ = models
    pool = EnginePool(settings_for=lambda path: LoadSettings(
        threads=TEST_THREADS, batch_threads=TEST_THREADS, context_length=256,
        mmproj=str(text.parent / "moved-away" / "mmproj-gemma3.gguf")))
    try:
        assert pool.get(text).reads_images
    finally:
        pool.close()
