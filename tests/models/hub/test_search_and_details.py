"""Search and model details through the real huggingface_hub client against the local Hub."""

from __future__ import annotations

import datetime as dt

import pytest

from models.foundation.errors import QuantDeskError
from models.hub.details import model_details, projector_for, quant_of, shard_of
from models.hub.search import search_models
from tests.models.hub.conftest import GATED_TOKEN
from tests.models.hub_server import HubFile, HubRepo


def test_search_filters_by_format_and_text_and_reports_every_column(hub):
    page = search_models("tiny", fmt="gguf")
    assert [m.repo_id for m in page.results] == ["acme/tiny-GGUF"]
    m = page.results[0]
    assert (m.author, m.downloads, m.likes, m.license, m.gated) == ("acme", 500, 7, "apache-2.0", False)
    assert m.updated == dt.datetime(2025, 3, 1, 10, 0, tzinfo=dt.timezone.utc)
    assert [m.repo_id for m in search_models("tiny", fmt="safetensors").results] == ["acme/tiny-hf"]
    gated = search_models("gated").results[0]
    assert gated.gated == "manual" and gated.license == "llama3"
    # The client sent the Hub's query parameters.
    query = [r["query"] for r in hub.state.requests if r["path"] == "/api/models"][0]
    assert query["search"] == ["tiny"] and query["filter"] == ["gguf"] and query["sort"] == ["downloads"]
    assert "downloads" in query["expand"] and "gated" in query["expand"]


@pytest.mark.parametrize("sort, expected", [
    ("downloads", ["acme/tiny-hf", "acme/tiny-GGUF", "meta/gated-GGUF"]),
    ("likes", ["meta/gated-GGUF", "acme/tiny-GGUF", "acme/tiny-hf"]),
    ("recent", ["meta/gated-GGUF", "acme/tiny-GGUF", "acme/tiny-hf"]),
])
def test_search_sorts(hub, sort, expected):
    got = [m.repo_id for m in search_models("", fmt="any", sort=sort).results]
    assert [r for r in got if r in expected] == expected


def test_search_pages_follow_the_hubs_link_header(hub):
    for i in range(7):
        hub.state.add_repo(HubRepo(f"many/model-{i}-GGUF", {}, downloads=1000 - i, tags=["gguf"]))
    hub.state.page_size = 2  # the server splits its answer into cursor-linked pages of 2
    pages = [search_models("model-", page=p, page_size=3) for p in range(3)]
    assert [[m.repo_id[-7:-5] for m in p.results] for p in pages] == [
        ["-0", "-1", "-2"], ["-3", "-4", "-5"], ["-6"]]
    assert [p.has_more for p in pages] == [True, True, False]
    assert any("cursor" in r["query"] for r in hub.state.requests)


def test_search_rejects_bad_arguments_with_a_sentence(hub):
    with pytest.raises(QuantDeskError, match="sort order"):
        search_models("x", sort="best")
    with pytest.raises(QuantDeskError, match="format"):
        search_models("x", fmt="onnx")


def test_search_errors_become_sentences(hub):
    hub.state.faults.api_status = 400  # (5xx would be retried by the client for ~20 s first)
    with pytest.raises(QuantDeskError, match="HTTP 400"):
        search_models("tiny")


@pytest.mark.parametrize("path, quant, shard", [
    ("SmolLM2-135M-Instruct-Q4_K_M.gguf", "Q4_K_M", (1, 1)),
    ("model.Q8_0.gguf", "Q8_0", (1, 1)),
    ("Q4_K_M/x-Q4_K_M-00002-of-00003.gguf", "Q4_K_M", (2, 3)),
    ("qwen2.5-7b-instruct-q5_k_m-00001-of-00002.gguf", "Q5_K_M", (1, 2)),
    ("Llama-3-8B-IQ2_XXS.gguf", "IQ2_XXS", (1, 1)),
    ("Qwen3-30B-A3B-IQ4_XS.gguf", "IQ4_XS", (1, 1)),
    ("Meta-Llama-3.1-70B-Instruct-IQ1_M-00001-of-00002.gguf", "IQ1_M", (1, 2)),
    ("IQ3_M/model-IQ3_M.gguf", "IQ3_M", (1, 1)),
    ("bitnet-b1.58-2B-TQ1_0.gguf", "TQ1_0", (1, 1)),
    ("gpt-oss-20b-MXFP4_MOE.gguf", "MXFP4_MOE", (1, 1)),
    ("gpt-oss-20b-mxfp4.gguf", "MXFP4", (1, 1)),
    ("gemma-3-UD-Q4_K_XL.gguf", "UD-Q4_K_XL", (1, 1)),
    ("phi-bf16.gguf", "BF16", (1, 1)),
    ("model-f16.gguf", "F16", (1, 1)),
    ("Q3-notaquant.gguf", None, (1, 1)),
    ("model.gguf", None, (1, 1)),
])
def test_quant_names_and_shards_are_parsed(path, quant, shard):
    assert quant_of(path) == quant
    assert shard_of(path) == shard


def test_details_list_files_with_lfs_sha256_and_group_variants(hub):
    details = model_details("acme/tiny-GGUF")
    repo = hub.state.repos["acme/tiny-GGUF"]
    assert details.commit == repo.sha
    by_path = {f.path: f for f in details.files}
    assert set(by_path) == set(repo.files)
    for path, f in repo.files.items():
        assert by_path[path].size == f.size
        assert by_path[path].sha256 == (f.sha256 if f.is_lfs else None)
        assert by_path[path].blob_id == f.git_sha1
    variants = {v.quant: v for v in details.variants}
    assert set(variants) == {"Q4_K_M", "Q8_0", "Q6_K"}
    q6 = variants["Q6_K"]
    assert [f.path for f in q6.files] == ["Q6_K/tiny-Q6_K-00001-of-00002.gguf", "Q6_K/tiny-Q6_K-00002-of-00002.gguf"]
    assert q6.complete and q6.size == 350_000
    assert [f.path for f in details.extra_gguf] == ["vision/mmproj-tiny-F16.gguf"]
    assert details.default_variant().quant == "Q4_K_M"
    assert details.checkpoint is None
    # The file list came from the tree API pinned to the commit model_info reported.
    assert any(r["path"] == f"/api/models/acme/tiny-GGUF/tree/{repo.sha}" for r in hub.state.requests)


def test_details_recognise_a_convertible_safetensors_checkpoint(hub):
    details = model_details("acme/tiny-hf")
    assert details.variants == []
    ckpt = details.checkpoint
    assert ckpt is not None and ckpt.architectures == ["LlamaForCausalLM"]
    assert [f.path for f in ckpt.weights] == ["model.safetensors"]
    assert {f.path for f in ckpt.side_files} == {"config.json", "tokenizer.json", "tokenizer_config.json"}


def test_incomplete_shard_sets_are_flagged(hub):
    hub.state.add_repo(HubRepo("acme/broken-GGUF", {"b-Q4_0-00001-of-00002.gguf": HubFile(b"x" * 2000)}))
    variant = model_details("acme/broken-GGUF").variants[0]
    assert variant.expected_shards == 2 and not variant.complete


def test_details_of_missing_and_private_repos_are_sentences(hub, monkeypatch):
    with pytest.raises(QuantDeskError, match="was not found on the Hub"):
        model_details("acme/does-not-exist")
    with pytest.raises(QuantDeskError, match="private"):
        model_details("acme/private-GGUF")
    monkeypatch.setenv("HF_TOKEN", GATED_TOKEN)
    assert model_details("acme/private-GGUF").variants[0].quant == "Q4_0"
    assert hub.state.requests[-1]["auth"] == GATED_TOKEN


def test_details_of_a_mixture_of_experts_give_total_and_active_parameters(hub):
    import json

    from models.gguf_header import parameters_text

    from tests.factory.checkpoints import QWEN3_30B_A3B_CONFIG as config
    hub.state.add_repo(HubRepo("qwen/moe", {"config.json": HubFile(json.dumps(config).encode()),
                                            "model.safetensors": HubFile(b"x" * 2000)},
                               config={"architectures": ["Qwen3MoeForCausalLM"]}))
    details = model_details("qwen/moe")
    assert parameters_text(details.parameters, details.active_parameters) == "30.5B total, 3.3B active"
    assert model_details("acme/tiny-hf").active_parameters is None  # a dense config: no count of its own


def test_a_variant_downloads_with_the_nearest_closest_vision_encoder(hub):
    """llama.cpp's pairing: an mmproj in the variant's folder or one above it, the nearest
    folder first, then the precision closest to the variant's."""
    from models.hub.downloads import plan_details
    from tests.models.hub.conftest import blob
    from tests.models.hub_server import HubFile, HubRepo

    hub.state.add_repo(HubRepo("optic/eyes-GGUF", {
        "eyes-Q4_K_M.gguf": HubFile(blob(11, 30_000)),
        "eyes-F16.gguf": HubFile(blob(12, 60_000)),
        "mmproj-eyes-F32.gguf": HubFile(blob(13, 9_000)),
        "mmproj-eyes-F16.gguf": HubFile(blob(14, 5_000)),
        "mmproj-eyes-Q8_0.gguf": HubFile(blob(15, 3_000)),
        "Q6_K/eyes-Q6_K.gguf": HubFile(blob(16, 40_000)),
        "Q6_K/mmproj-eyes-BF16.gguf": HubFile(blob(17, 5_000)),
        "other/mmproj-elsewhere-Q4_K_M.gguf": HubFile(blob(18, 2_000)),
    }, tags=["gguf"]))
    details = model_details("optic/eyes-GGUF")
    paired = {v.quant: projector_for(details, v).path for v in details.variants}
    assert paired == {"Q4_K_M": "mmproj-eyes-Q8_0.gguf", "F16": "mmproj-eyes-F16.gguf",
                      "Q6_K": "Q6_K/mmproj-eyes-BF16.gguf"}
    plan = plan_details(details, "Q4_K_M")
    assert [f.path for f in plan.files] == ["eyes-Q4_K_M.gguf", "mmproj-eyes-Q8_0.gguf"]
    assert plan.size == 33_000
