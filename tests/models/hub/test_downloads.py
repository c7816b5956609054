"""Downloads through the real client against the local Hub, with faults injected."""

from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path

import pytest

from models.foundation.errors import QuantDeskError
from models.foundation.paths import app_paths
from models.hub import auth
from models.hub.downloads import (
    DownloadManager, download_plan, incomplete_downloads, plan_pull, parse_pull_spec,
)
from models.hub.transfer import RetryPolicy, local_target, part_path, safe_relative_path, sidecar_path
from tests.models.hub.conftest import GATED_TOKEN, blob
from tests.models.hub_server import HubFile, HubRepo

FAST = RetryPolicy(max_failures=4, base_wait=0.05, max_wait=0.2, read_timeout=5)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def models_dir() -> Path:
    return app_paths().ensure().models


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file() and p.name.startswith("."))


def file_gets(hub, name: str) -> list[dict]:
    return [r for r in hub.state.requests if r["method"] == "GET" and
            (r["path"].endswith(name) or r["path"].startswith("/cdn/") and name in str(r["query"]))]


def test_pull_downloads_verified_files_into_the_models_folder(hub):
    plan = plan_pull("acme/tiny-GGUF:Q6_K")
    reports = []
    paths = download_plan(plan, reports.append, policy=FAST)
    repo = hub.state.repos["acme/tiny-GGUF"]
    assert [p.relative_to(models_dir()).as_posix() for p in paths] == [
        "hub/acme/tiny-GGUF/Q6_K/tiny-Q6_K-00001-of-00002.gguf",
        "hub/acme/tiny-GGUF/Q6_K/tiny-Q6_K-00002-of-00002.gguf"]
    for path, remote in zip(paths, plan.files):
        assert sha256(path) == repo.files[remote.path].sha256
    assert reports[-1].done == reports[-1].total == 350_000 and reports[-1].stage == "Downloading"
    assert "MiB" in reports[-1].detail and "ETA" in reports[-1].detail
    assert leftovers(models_dir()) == []
    # Files come from the commit the plan pinned, through the Hub's resolve → CDN redirect.
    assert any(r["path"].startswith(f"/acme/tiny-GGUF/resolve/{repo.sha}/") for r in hub.state.requests)


def test_small_files_are_verified_against_the_git_blob_id(hub):
    paths = download_plan(plan_pull("acme/tiny-hf"), policy=FAST)
    assert {p.name for p in paths} == {"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"}
    assert (paths[0].parent / "config.json").read_bytes() == hub.state.repos["acme/tiny-hf"].files["config.json"].read()


def test_a_dropped_connection_resumes_with_range_and_the_file_verifies(hub):
    hub.state.faults.drop_after["tiny.Q8_0.gguf"] = 123_457
    hub.state.faults.drop_times["tiny.Q8_0.gguf"] = 2
    hub.state.faults.drop_after["tiny.Q8_0.gguf"] = 123_457
    path, = download_plan(plan_pull("acme/tiny-GGUF:Q8_0"), policy=FAST)
    assert sha256(path) == hub.state.repos["acme/tiny-GGUF"].files["tiny.Q8_0.gguf"].sha256
    ranges = [r["range"] for r in file_gets(hub, "tiny.Q8_0.gguf") if r["path"].startswith("/cdn/")]
    assert ranges[0] is None and ranges[1] == "bytes=123457-"  # resumed, not restarted
    assert len(ranges) == 3 and ranges[2] == "bytes=123457-"  # the second drop sent nothing new


def test_wrong_bytes_are_detected_and_not_kept(hub):
    hub.state.faults.corrupt.add("tiny-Q4_K_M.gguf")
    with pytest.raises(QuantDeskError, match="does not match the Hub's sha256"):
        download_plan(plan_pull("acme/tiny-GGUF:Q4_K_M"), policy=FAST)
    target = local_target(models_dir(), "acme/tiny-GGUF", "tiny-Q4_K_M.gguf")
    assert not target.exists() and not part_path(target).exists() and not sidecar_path(target).exists()


def test_a_body_longer_than_the_listed_file_is_refused_and_not_kept(hub):
    hub.state.faults.extra_bytes["tiny-Q4_K_M.gguf"] = 1000
    with pytest.raises(QuantDeskError, match="more bytes than the file has"):
        download_plan(plan_pull("acme/tiny-GGUF:Q4_K_M"), policy=FAST)
    target = local_target(models_dir(), "acme/tiny-GGUF", "tiny-Q4_K_M.gguf")
    assert not target.exists() and not part_path(target).exists()
    assert len(file_gets(hub, "tiny-Q4_K_M.gguf")) == FAST.max_failures + 1  # retried, then gave up


def test_gated_repo_needs_a_token_401_then_403_then_works(hub, monkeypatch):
    plan = plan_pull("meta/gated-GGUF:Q4_0")  # metadata of gated repos is public, as on the Hub
    with pytest.raises(QuantDeskError, match=r"HTTP 401.*no Hugging Face token.*HF_TOKEN"):
        download_plan(plan, policy=FAST)
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    with pytest.raises(QuantDeskError, match=r"HTTP 403.*from HF_TOKEN") as err:
        download_plan(plan, policy=FAST)
    assert "hf_wrong" not in str(err.value)  # the token itself is never shown
    monkeypatch.delenv("HF_TOKEN")
    stored = auth.store_token(GATED_TOKEN)
    assert stat.S_IMODE(os.stat(stored).st_mode) == 0o600
    path, = download_plan(plan, policy=FAST)
    assert path.stat().st_size == 80_000
    resolves = [r for r in hub.state.requests if "/resolve/" in r["path"] and r["path"].endswith("gated-Q4_0.gguf")]
    assert resolves[-1]["method"] == "HEAD" and resolves[-1]["auth"] == GATED_TOKEN


def test_hf_home_token_is_used_when_nothing_else_is_set(hub, tmp_path, monkeypatch):
    home = tmp_path / "hf-home-2"
    home.mkdir()
    (home / "token").write_text(GATED_TOKEN)
    monkeypatch.setenv("HF_HOME", str(home))
    assert auth.resolve_token() == (GATED_TOKEN, str(home / "token"))
    download_plan(plan_pull("acme/private-GGUF"), policy=FAST)


def test_not_found_is_a_sentence(hub):
    with pytest.raises(QuantDeskError, match="acme/nope was not found"):
        plan_pull("acme/nope")
    with pytest.raises(QuantDeskError, match=r"no Q2_K GGUF file \(it has: Q4_K_M, Q6_K, Q8_0\)"):
        plan_pull("acme/tiny-GGUF:Q2_K")
    with pytest.raises(QuantDeskError, match="not a model name"):
        parse_pull_spec("just-a-name")
    # A file the listing promised but the server no longer has: 404 at download time.
    plan = plan_pull("acme/tiny-GGUF:Q8_0")
    del hub.state.repos["acme/tiny-GGUF"].files["tiny.Q8_0.gguf"]
    with pytest.raises(QuantDeskError, match="tiny.Q8_0.gguf was not found"):
        download_plan(plan, policy=FAST)


def test_429_is_retried_after_retry_after(hub):
    hub.state.faults.rate_limited["tiny-Q4_K_M.gguf"] = 1
    hub.state.faults.retry_after = 1
    start = time.monotonic()
    path, = download_plan(plan_pull("acme/tiny-GGUF:Q4_K_M"), policy=FAST)
    assert time.monotonic() - start >= 1.0  # waited as told, not FAST's 0.05 s backoff
    assert path.exists()
    assert len([r for r in file_gets(hub, "tiny-Q4_K_M.gguf") if r["path"].startswith("/cdn/")]) == 2


@pytest.mark.parametrize("name", [
    "../escape-Q4_0.gguf", "/etc/evil-Q4_0.gguf", "sub/../../x-Q4_0.gguf", ".hidden-Q4_0.gguf",
    "a\\..\\b-Q4_0.gguf", "ctl\x07-Q4_0.gguf", "C:evil-Q4_0.gguf", "NUL.Q4_0.gguf", "dir./x-Q4_0.gguf",
])
def test_hostile_file_names_are_refused_before_anything_is_written(hub, name):
    hub.state.add_repo(HubRepo("evil/repo-GGUF", {name: HubFile(b"x" * 2000)}, tags=["gguf"]))
    with pytest.raises(QuantDeskError, match="will not write"):
        plan = plan_pull("evil/repo-GGUF:Q4_0")
        download_plan(plan, policy=FAST)
    assert not any("/resolve/" in r["path"] for r in hub.state.requests)
    assert list(models_dir().rglob("*")) == []


@pytest.mark.parametrize("good", ["model-Q4_K_M.gguf", "Q4_K_M/model (v2)-Q4_K_M.gguf", "a_b+c@d=e,f[1].gguf"])
def test_ordinary_names_are_accepted(good):
    assert safe_relative_path("owner/name", good).as_posix() == f"owner/name/{good}"


def test_free_disk_is_checked_before_starting(hub):
    hub.state.add_repo(HubRepo("acme/huge-GGUF", {"huge-Q8_0.gguf": HubFile(b"x" * 2000, declared_size=1 << 60)}))
    with pytest.raises(QuantDeskError, match=r"needs .* GiB but the disk holding .* has .* GiB free"):
        download_plan(plan_pull("acme/huge-GGUF"), policy=FAST)
    assert not any("/resolve/" in r["path"] for r in hub.state.requests)


def test_manager_pause_resume_and_cancel(hub):
    hub.state.faults.throttle_bytes_per_s = 100_000  # 500 kB takes ~5 s: time to pause on a busy machine
    manager = DownloadManager(policy=FAST)
    task = manager.enqueue(plan_pull("acme/tiny-GGUF:Q8_0"))
    target = local_target(models_dir(), "acme/tiny-GGUF", "tiny.Q8_0.gguf")
    deadline = time.monotonic() + 10
    while not (part_path(target).exists() and part_path(target).stat().st_size > 50_000):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    manager.pause(task)
    assert task.wait(5) and task.state == "paused"
    kept = part_path(target).stat().st_size
    assert 0 < kept < 500_000 and sidecar_path(target).exists() and not target.exists()
    # After a restart the partial download is found on disk.
    [found] = incomplete_downloads()
    assert found.files[0].path == "tiny.Q8_0.gguf"
    hub.state.faults.throttle_bytes_per_s = None
    manager.resume(task)
    assert task.wait(10) and task.state == "done", task.error
    assert sha256(target) == hub.state.repos["acme/tiny-GGUF"].files["tiny.Q8_0.gguf"].sha256
    resumed_from = int(file_gets(hub, "tiny.Q8_0.gguf")[-1]["range"].split("=")[1].rstrip("-"))
    assert resumed_from >= kept
    # Cancel removes partial data.
    hub.state.faults.throttle_bytes_per_s = 100_000
    task2 = manager.enqueue(plan_pull("acme/tiny-GGUF:Q6_K"))
    first = local_target(models_dir(), "acme/tiny-GGUF", "Q6_K/tiny-Q6_K-00001-of-00002.gguf")
    while not part_path(first).exists():
        assert time.monotonic() < deadline + 10
        time.sleep(0.02)
    manager.cancel(task2)
    assert task2.wait(5) and task2.state == "cancelled"
    assert not part_path(first).exists() and not sidecar_path(first).exists() and not first.exists()
    assert incomplete_downloads() == []


def test_changed_remote_file_discards_the_stale_partial(hub):
    plan = plan_pull("acme/tiny-GGUF:Q8_0")
    target = local_target(models_dir(), "acme/tiny-GGUF", "tiny.Q8_0.gguf")
    hub.state.faults.drop_after["tiny.Q8_0.gguf"] = 100_000
    hub.state.faults.drop_times["tiny.Q8_0.gguf"] = 100
    with pytest.raises(QuantDeskError, match="failed 5 times in a row"):
        download_plan(plan, policy=FAST)
    assert part_path(target).stat().st_size == 100_000
    # The repo is updated: same name, new content. The old part must not be reused.
    repo = hub.state.repos["acme/tiny-GGUF"]
    repo.files["tiny.Q8_0.gguf"] = HubFile(blob(99, 400_000))
    repo.sha = "f" * 40
    hub.state.faults.drop_after.clear()
    path, = download_plan(plan_pull("acme/tiny-GGUF:Q8_0"), policy=FAST)
    assert sha256(path) == repo.files["tiny.Q8_0.gguf"].sha256
    assert file_gets(hub, "tiny.Q8_0.gguf")[-1]["range"] is None
