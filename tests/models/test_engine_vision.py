"""Images in the engine: a tiny Gemma 3 converted by QuantDesk, its mmproj loaded beside it.

Oracle: transformers on the same checkpoint (``vision_oracle``), with the prompt laid out
as llama-server lays it out. The engine's greedy reply must be transformers' greedy reply,
token for token, with log-probabilities close enough that every preprocessing mistake in
``WRONG_PREPROCESSING`` (BGR, a flip, wrong mean/std, unscaled pixels) is told apart.
Qwen2-VL, Qwen2.5-VL and Qwen3-VL (M-RoPE positions) are checked the same way, on libmtmd's
layout; SmolVLM (Idefics3, a picture cut into tiles) too.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from models.engine import ChatOptions, EngineClient, LoadSettings
from models.foundation.errors import QuantDeskError
from quantize.convert.convert import convert_with_projector
from tests.factory.images import png_bytes, sample_picture
from tests.factory.vision import write_tiny_vision_checkpoint
from tests.models.conftest import TEST_THREADS
from tests.models.vision_oracle import WRONG_PREPROCESSING, Gemma3Oracle, Qwen2VLOracle, pixel_values

pytest.importorskip("torch")

IMAGE_TOKENS = 16  # the factory's Gemma 3: 8×8 patches pooled to 4×4
SETTINGS = dict(threads=TEST_THREADS, batch_threads=TEST_THREADS, context_length=256)
GREEDY = ChatOptions(temperature=0.0, max_tokens=8, logprobs=0)
#: Largest |Δ log-probability| allowed against transformers (F32 weights, F16 KV cache);
#: the wrong preprocessings all move some reply token by more than ten times this.
TOLERANCE = 0.01


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    """The tiny Gemma 3 (hub layout), its F32 text GGUF and F32 mmproj."""
    root = tmp_path_factory.mktemp("gemma3-vision")
    ck = write_tiny_vision_checkpoint(root / "gemma3")
    text, projector = convert_with_projector(ck.path, root / "gemma3-F32.gguf", "f32")
    return ck.path, text, projector


@pytest.fixture(scope="module")
def engine(gemma3):
    _, text, projector = gemma3
    client = EngineClient()
    client.load(text, LoadSettings(**SETTINGS, mmproj=str(projector)))
    yield client
    client.shutdown()


@pytest.fixture(scope="module")
def oracle(gemma3):
    return Gemma3Oracle(gemma3[0])


def _message(*parts) -> dict:
    """A user message of text and image (bytes) parts."""
    return {"role": "user", "content": [{"type": "image", "data": p} if isinstance(p, bytes)
                                        else {"type": "text", "text": p} for p in parts]}


def _reply_tokens(reply) -> tuple[list[list[int]], list[float]]:
    return [e["bytes"] for e in reply.logprobs], [e["logprob"] for e in reply.logprobs]


PICTURE = sample_picture()


@pytest.mark.parametrize("layout", ["text, image, text", "image, text"])
def test_greedy_reply_about_an_image_equals_transformers(engine, oracle, gemma3, layout):
    image = png_bytes(PICTURE)
    if layout == "image, text":
        message, segments = _message(image, "What is this?"), \
            ["<bos><start_of_turn>user\n", None, "What is this?<end_of_turn>\n<start_of_turn>model\n"]
    else:
        message, segments = _message("What is", image, "this?"), \
            ["<bos><start_of_turn>user\nWhat is", None, "this?<end_of_turn>\n<start_of_turn>model\n"]
    reply = engine.chat([message], GREEDY).wait()
    ids = oracle.prompt_ids(segments, IMAGE_TOKENS)
    assert reply.stats.prompt_tokens == len(ids)
    assert (reply.stats.images, reply.stats.images_encoded, reply.stats.image_tokens) == (1, 1, IMAGE_TOKENS)
    assert reply.stats.image_encode_seconds > 0
    tokens, expected = oracle.greedy(ids, [pixel_values(PICTURE, gemma3[0])], GREEDY.max_tokens)
    pieces, ours = _reply_tokens(reply)
    assert pieces == [oracle.token_bytes(t) for t in tokens]
    assert np.max(np.abs(np.subtract(ours, expected))) < TOLERANCE
    # Each preprocessing mistake moves the same reply's log-probabilities far more.
    for mistake in WRONG_PREPROCESSING:
        wrong = oracle.logprobs(ids, [pixel_values(PICTURE, gemma3[0], mistake)], tokens)
        assert np.max(np.abs(np.subtract(wrong, expected))) > 10 * TOLERANCE, mistake


def test_second_turn_encodes_no_image_and_answers_as_a_fresh_evaluation(engine, gemma3):
    first = [_message("Describe", png_bytes(PICTURE), "briefly.")]
    one = engine.chat(first, GREEDY).wait()
    history = first + [{"role": "assistant", "content": one.text}, {"role": "user", "content": "And?"}]
    two = engine.chat(history, GREEDY).wait()
    assert two.stats.images == 1 and two.stats.images_encoded == 0
    assert two.stats.prompt_tokens_reused >= one.stats.prompt_tokens
    _, text, projector = gemma3
    with EngineClient() as fresh:
        fresh.load(text, LoadSettings(**SETTINGS, mmproj=str(projector)))
        again = fresh.chat(history, GREEDY).wait()
    assert again.stats.images_encoded == 1 and again.stats.prompt_tokens_reused == 0
    assert _reply_tokens(two)[0] == _reply_tokens(again)[0]
    assert np.allclose(_reply_tokens(two)[1], _reply_tokens(again)[1], atol=1e-3)


def test_two_images_in_one_message_and_an_earlier_turn(engine, oracle, gemma3):
    other = sample_picture(seed=7)[::-1].copy()
    messages = [_message("A", png_bytes(PICTURE)), {"role": "assistant", "content": "ok"},
                _message("B", png_bytes(other), "and", png_bytes(PICTURE), "?")]
    reply = engine.chat(messages, GREEDY).wait()
    assert (reply.stats.images, reply.stats.image_tokens) == (3, 3 * IMAGE_TOKENS)
    segments = ["<bos><start_of_turn>user\nA", None, "<end_of_turn>\n<start_of_turn>model\nok<end_of_turn>\n"
                "<start_of_turn>user\nB", None, "and", None, "?<end_of_turn>\n<start_of_turn>model\n"]
    ids = oracle.prompt_ids(segments, IMAGE_TOKENS)
    assert reply.stats.prompt_tokens == len(ids)
    pixels = [pixel_values(p, gemma3[0]) for p in (PICTURE, other, PICTURE)]
    tokens, expected = oracle.greedy(ids, pixels, GREEDY.max_tokens)
    pieces, ours = _reply_tokens(reply)
    assert pieces == [oracle.token_bytes(t) for t in tokens]
    assert np.max(np.abs(np.subtract(ours, expected))) < TOLERANCE


def test_conversation_reopened_from_disk_continues_without_encoding(gemma3):
    _, text, projector = gemma3
    first = [_message("Look:", png_bytes(PICTURE))]
    with EngineClient() as client:
        client.load(text, LoadSettings(**SETTINGS, mmproj=str(projector)))
        one = client.chat(first, GREEDY, conversation_id="picture").wait()
    history = first + [{"role": "assistant", "content": one.text}, {"role": "user", "content": "More."}]
    with EngineClient() as client:
        client.load(text, LoadSettings(**SETTINGS, mmproj=str(projector)))
        two = client.chat(history, GREEDY, conversation_id="picture").wait()
    assert two.stats.session_restored and two.stats.images_encoded == 0


def test_image_larger_than_the_micro_batch_is_answered(gemma3):
    """Gemma 3 reads an image with non-causal attention, which llama.cpp can only do in one
    micro-batch (it aborts otherwise): the load grows the batches to hold one image."""
    _, text, projector = gemma3
    with EngineClient() as client:
        report = client.load(text, LoadSettings(**SETTINGS, batch_size=4, micro_batch_size=4,
                                                mmproj=str(projector)))
        assert report.settings.micro_batch_size >= IMAGE_TOKENS
        reply = client.chat([_message(png_bytes(PICTURE), "Hi")], GREEDY).wait()
    assert reply.stats.completion_tokens == GREEDY.max_tokens


def test_bad_images_are_sentences_and_the_engine_goes_on(engine):
    good = png_bytes(PICTURE)
    cases = {
        "truncated": good[:20],
        "damaged": good[:60] + bytes(len(good) - 60),
        "not an image": b"hello, this is text",
        "webp": b"RIFF\x10\x00\x00\x00WEBPVP8 " + bytes(32),
        "50 megapixels": good[:16] + (10000).to_bytes(4, "big") + (5000).to_bytes(4, "big") + good[24:],
    }
    for name, data in cases.items():
        with pytest.raises(QuantDeskError) as caught:
            engine.chat([_message("What is", data)], GREEDY).wait()
        assert caught.value.what.endswith("."), name
    with pytest.raises(QuantDeskError, match=r"its 20 images take 320\), more than the 256-token context"):
        engine.chat([_message(*([good] * 20), "All of them?")], GREEDY).wait()
    assert engine.chat([_message("What is", good)], GREEDY).wait().stats.images_encoded in (0, 1)


def test_image_to_a_model_without_vision_is_a_sentence(gemma3):
    _, text, _ = gemma3
    with EngineClient() as client:
        client.load(text, LoadSettings(**SETTINGS))
        with pytest.raises(QuantDeskError, match="without a vision encoder"):
            client.chat([_message("What is", png_bytes(PICTURE))], GREEDY).wait()
        assert client.chat([{"role": "user", "content": "Hi"}], GREEDY).wait().text is not None


def test_image_requests_batched_beside_text_requests(gemma3):
    _, text, projector = gemma3
    with EngineClient() as client:
        client.load(text, LoadSettings(**SETTINGS, parallel=4, mmproj=str(projector)))
        pictures = [sample_picture(seed=s) for s in range(4)]
        replies = [client.chat([_message("What is", png_bytes(p), "?")], GREEDY) for p in pictures]
        replies += [client.chat([{"role": "user", "content": f"Count to {n}."}], GREEDY) for n in range(4)]
        done = [r.wait() for r in replies]
        alone = client.chat([_message("What is", png_bytes(pictures[2]), "?")], GREEDY).wait()
    assert all(r.stats.completion_tokens == GREEDY.max_tokens for r in done)
    assert sum(r.stats.images_encoded for r in done[:4]) == 4
    assert _reply_tokens(done[2])[0] == _reply_tokens(alone)[0]


def test_mismatched_projector_is_refused_before_loading(tmp_path, gemma3):
    from quantize.convert import convert
    from tests.factory.checkpoints import write_tiny_checkpoint

    _, _, projector = gemma3
    other = write_tiny_checkpoint(tmp_path / "m", arch="llama", config_overrides={"hidden_size": 48})
    model = convert(other.path, tmp_path / "m.gguf", "f16")
    with EngineClient() as client:
        with pytest.raises(QuantDeskError, match="64 values.*48"):
            client.load(model, LoadSettings(**SETTINGS, mmproj=str(projector)))


def test_cli_chat_with_an_image_saved_and_resumed_without_encoding(gemma3, tmp_path):
    """``quantdesk chat MODEL --image FILE``: the mmproj beside the model is found, the
    picture goes with the first message, is stored with the conversation, and a resumed
    conversation continues from its saved state without encoding it again."""
    import subprocess
    import sys

    from app.core.conversations import ConversationStore
    from tests.conftest import REPO_ROOT

    _, text, _ = gemma3
    picture = tmp_path / "picture.png"
    picture.write_bytes(png_bytes(PICTURE))
    chat = [sys.executable, "-m", "app.cli", "chat", str(text), "--threads", str(TEST_THREADS),
            "--batch-threads", str(TEST_THREADS), "--ctx", "256", "--temperature", "0", "--max-tokens", "6"]
    first = subprocess.run(chat + ["--image", str(picture)], input="What is this?\n/exit\n",
                           capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "1 of 1 images encoded" in first.stderr
    short_id = first.stderr.split("saved as conversation ")[1].split(";")[0]
    stored = ConversationStore().branch(short_id)[0]
    assert stored.images == [png_bytes(PICTURE)] and stored.content == "What is this?"
    resumed = subprocess.run(chat + ["--resume", short_id], input="And now?\n/exit\n",
                             capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "0 of 1 images encoded" in resumed.stderr
    bad = subprocess.run(chat + ["--image", str(tmp_path / "missing.png")], input="/exit\n",
                         capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert bad.returncode != 0 and "Could not read the image" in bad.stderr and "Traceback" not in bad.stderr


def test_library_lists_the_encoder_with_its_model(gemma3):
    """`quantdesk list`: the model reads images, its mmproj is marked as its encoder."""
    import subprocess
    import sys

    from models.library import Library
    from tests.conftest import REPO_ROOT

    _, text, projector = gemma3
    library = Library()
    library.import_path(text)
    library.import_path(projector)
    listed = subprocess.run([sys.executable, "-m", "app.cli", "list"], capture_output=True, text=True,
                            timeout=120, cwd=REPO_ROOT)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[-1] if "(" not in line else line.split("  (")[0].split()[-1]: line
            for line in listed.stdout.splitlines()[1:]}
    assert "(reads images)" in rows[str(text)]
    assert "(vision encoder: loads with its model)" in rows[str(projector)]


def test_q8_0_model_and_encoder_answer_an_image(tmp_path):
    ck = write_tiny_vision_checkpoint(tmp_path / "gemma3")
    text, projector = convert_with_projector(ck.path, tmp_path / "gemma3-Q8_0.gguf", "q8_0")
    with EngineClient() as client:
        client.load(text, LoadSettings(**SETTINGS, mmproj=str(projector)))
        reply = client.chat([_message("What is", png_bytes(PICTURE), "this?")], GREEDY).wait()
    assert reply.stats.images_encoded == 1 and reply.stats.completion_tokens == GREEDY.max_tokens


@pytest.mark.parametrize("family", ["qwen2vl", "qwen2_5_vl"])
def test_m_rope_images_are_placed_as_libmtmd_places_them(tmp_path, family):
    """Qwen2-VL's images take fewer positions than tokens: the engine's reply (scheduler,
    prompt cache, a second turn from the cache) equals libmtmd's own evaluation of the
    whole prompt, whose positions the helper counts itself."""
    from models.engine.chat_template import render_chat
    from tests.models.mtmd_oracle import mtmd_greedy

    ck = write_tiny_vision_checkpoint(tmp_path / family, family)
    text, projector = convert_with_projector(ck.path, tmp_path / f"{family}.gguf", "f32")
    picture = tmp_path / "picture.png"
    picture.write_bytes(png_bytes(PICTURE))
    first = [_message(png_bytes(PICTURE), "What is this?")]
    with EngineClient() as client:
        client.load(text, LoadSettings(**SETTINGS, mmproj=str(projector)))
        one = client.chat(first, GREEDY).wait()
        history = first + [{"role": "assistant", "content": one.text}, {"role": "user", "content": "And?"}]
        two = client.chat(history, GREEDY).wait()
    assert two.stats.images_encoded == 0 and two.stats.prompt_tokens_reused >= one.stats.prompt_tokens
    template = json.loads((ck.path / "tokenizer_config.json").read_text())["chat_template"]
    marker = "<__media__>"
    for reply, messages in ((one, first), (two, history)):
        flat = [{"role": m["role"], "content": m["content"] if isinstance(m["content"], str) else
                 marker + "What is this?"} for m in messages]
        oracle = mtmd_greedy(text, projector, render_chat(template, flat), [picture], GREEDY.max_tokens)
        assert reply.stats.prompt_tokens == oracle["prompt_tokens"]
        assert oracle["positions"] < oracle["prompt_tokens"]  # the image took fewer positions
        pieces, ours = _reply_tokens(reply)
        assert pieces == oracle["pieces"]
        assert np.max(np.abs(np.subtract(ours, oracle["logprobs"]))) < 1e-3


# Largest |Δ log-probability| against transformers seen: 8e-5 (Qwen2-VL), 1.3e-3
# (Qwen2.5-VL), 7.3e-4 (Qwen3-VL); the smallest a wrong preprocessing moved a token: 3.6e-3
# (a flip), 4.8e-3 (BGR) for Qwen2.x, 0.29 (mean/std 0.5) for Qwen3-VL.
@pytest.mark.parametrize("family, tolerance, apart", [("qwen2vl", 2.5e-4, 10), ("qwen2_5_vl", 2e-3, 2),
                                                      ("qwen3vl", 2e-3, 10)])
def test_m_rope_reply_about_an_image_equals_transformers(tmp_path, family, tolerance, apart):
    """Qwen2-VL, Qwen2.5-VL and Qwen3-VL end to end: the engine's greedy reply (through the
    chat template, libmtmd's prompt layout and M-RoPE positions; Qwen3-VL's interleaved
    sections and deepstack slices) is transformers' on the same checkpoint, token for
    token; each preprocessing mistake moves some token's log-probability more than
    ``apart`` times the tolerance."""
    from models.engine.chat_template import render_chat
    from tests.models.mtmd_oracle import mtmd_greedy

    ck = write_tiny_vision_checkpoint(tmp_path / family, family)
    text, projector = convert_with_projector(ck.path, tmp_path / f"{family}.gguf", "f32")
    picture = tmp_path / "picture.png"
    picture.write_bytes(png_bytes(PICTURE))
    with EngineClient() as client:
        client.load(text, LoadSettings(**SETTINGS, mmproj=str(projector)))
        reply = client.chat([_message(png_bytes(PICTURE), "What is this?")], GREEDY).wait()
    template = json.loads((ck.path / "tokenizer_config.json").read_text())["chat_template"]
    prompt = render_chat(template, [{"role": "user", "content": "<__media__>What is this?"}])
    layout = mtmd_greedy(text, projector, prompt, [picture], 1)["layout"]  # as libmtmd lays it out
    assert reply.stats.prompt_tokens == sum(len(c.get("text", ())) + c.get("image", 0) for c in layout)
    oracle = Qwen2VLOracle(ck.path)
    tokens, expected = oracle.greedy(layout, oracle.pixels(PICTURE), GREEDY.max_tokens)
    pieces, ours = _reply_tokens(reply)
    assert pieces == [oracle.token_bytes(t) for t in tokens]
    assert np.max(np.abs(np.subtract(ours, expected))) < tolerance
    for mistake in WRONG_PREPROCESSING:
        wrong = oracle.logprobs(layout, oracle.pixels(PICTURE, mistake), tokens)
        assert np.max(np.abs(np.subtract(wrong, expected))) > apart * tolerance, mistake


def test_a_tiled_picture_counts_as_one_picture():
    """libmtmd gives one chunk per tile and the overview, each with the picture's id; the
    same picture sent twice gives the same ids again: the pictures are told apart by how
    many chunks one of them makes."""
    from models.engine.vision import ImageSpan, ImagePrompt, number_pictures

    spans = [ImageSpan(i, 1, None) for i in range(8)]
    number_pictures(spans, list("aaabaaab"), list("abab"))
    assert [s.picture for s in spans] == [0, 0, 0, 1, 2, 2, 2, 3]
    assert [s.last for s in spans] == [False, False, True, True, False, False, True, True]
    assert ImagePrompt(list(range(8)), {s.start: s for s in spans}).image_count == 4


def test_smolvlm_reply_about_a_tiled_picture_equals_transformers(tmp_path):
    """SmolVLM (Idefics3) end to end: a 96×80 picture is scaled to the longest edge (128),
    to whole 64-pixel tiles (2×2) and cut, the overview last; libmtmd's layout (row and
    column markers, the overview after "\n\n") and pixels (its port of Pillow's Lanczos)
    equal transformers' own image processor's, so the engine's greedy reply is
    transformers', token for token. Largest |Δ log-probability| seen: 4.6e-4 (3e-4 at
    128×128, 1.9e-4 at 50×128, a 1×2 grid); the smallest a wrong preprocessing moved a
    token: 0.45 (mean/std 0.5)."""
    from models.engine.chat_template import render_chat
    from tests.models.mtmd_oracle import mtmd_greedy
    from tests.models.vision_oracle import Idefics3Oracle

    ck = write_tiny_vision_checkpoint(tmp_path / "smolvlm", "smolvlm")
    text, projector = convert_with_projector(ck.path, tmp_path / "smolvlm.gguf", "f32")
    picture = sample_picture(96)[:, :80].copy()
    (tmp_path / "picture.png").write_bytes(png_bytes(picture))
    with EngineClient() as client:
        client.load(text, LoadSettings(**SETTINGS, mmproj=str(projector)))
        reply = client.chat([_message(png_bytes(picture), "What is this?")], GREEDY).wait()
    assert (reply.stats.images, reply.stats.images_encoded, reply.stats.image_tokens) == (1, 1, 5 * 16)
    template = json.loads((ck.path / "tokenizer_config.json").read_text())["chat_template"]
    prompt = render_chat(template, [{"role": "user", "content": "<__media__>What is this?"}])
    layout = mtmd_greedy(text, projector, prompt, [tmp_path / "picture.png"], 1)["layout"]
    assert reply.stats.prompt_tokens == sum(len(c.get("text", ())) + c.get("image", 0) for c in layout)
    oracle = Idefics3Oracle(ck.path)
    tokens, expected = oracle.greedy(layout, oracle.pixels(picture), GREEDY.max_tokens)
    pieces, ours = _reply_tokens(reply)
    assert pieces == [oracle.token_bytes(t) for t in tokens]
    assert np.max(np.abs(np.subtract(ours, expected))) < 2e-3
    for mistake in WRONG_PREPROCESSING:
        wrong = oracle.logprobs(layout, oracle.pixels(picture, mistake), tokens)
        assert np.max(np.abs(np.subtract(wrong, expected))) > 20e-3, mistake


@pytest.mark.parametrize("outtype, tolerance", [("f32", 1e-3), ("f16", 1e-3), ("q8_0", 1e-2)])
def test_image_embeddings_equal_transformers(gemma3, oracle, tmp_path, outtype, tolerance):
    """The vision encoder's output for one picture: libmtmd on our mmproj against
    transformers' get_image_features, relative to the embeddings' size."""
    import torch

    from tests.models.mtmd_oracle import mtmd_image_embeddings

    model_dir, text, _ = gemma3
    _, projector = convert_with_projector(model_dir, tmp_path / f"gemma3-{outtype}.gguf", outtype)
    picture = tmp_path / "picture.png"
    picture.write_bytes(png_bytes(PICTURE))
    ours = mtmd_image_embeddings(text, projector, picture, tmp_path / "embeddings.npy")
    with torch.no_grad():
        features = oracle.model.get_image_features(torch.from_numpy(pixel_values(PICTURE, model_dir)))
    theirs = getattr(features, "pooler_output", features)
    theirs = (theirs[0] if isinstance(theirs, (tuple, list)) else theirs).reshape(ours.shape).double().numpy()
    assert np.linalg.norm(ours - theirs) / np.linalg.norm(theirs) < tolerance
    wrong = oracle.model.get_image_features(torch.from_numpy(pixel_values(PICTURE, model_dir, "BGR")))
    wrong = getattr(wrong, "pooler_output", wrong)
    wrong = (wrong[0] if isinstance(wrong, (tuple, list)) else wrong).reshape(ours.shape).detach().double().numpy()
    assert np.linalg.norm(ours - wrong) / np.linalg.norm(theirs) > 10 * tolerance
