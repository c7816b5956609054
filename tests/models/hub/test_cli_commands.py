"""`quantdesk search / pull / list / rm` end to end against the local Hub."""

from __future__ import annotations

import logging
import os
import stat

from app.cli import main
from models.foundation.paths import app_paths
from models.hub import auth
from tests.models.hub.conftest import GATED_TOKEN
from tests.models.hub_server import HubFile, HubRepo
from tests.models.library_gguf import write_gguf


def test_search_prints_a_table(hub, capsys):
    assert main(["search", "tiny", "--format", "any", "--sort", "likes"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["MODEL", "DOWNLOADS", "LIKES", "UPDATED", "LICENSE", "GATED"]
    assert out[1].split() == ["acme/tiny-GGUF", "500", "7", "2025-03-01", "apache-2.0", "no"]
    assert out[2].split()[0] == "acme/tiny-hf"


def test_pull_list_rm_round_trip_with_a_real_gguf(hub, tmp_path, capsys):
    gguf = write_gguf(tmp_path / "real-Q8_0.gguf", name="Real Tiny", n_ctx=321)
    hub.state.add_repo(HubRepo("acme/real-GGUF", {"real-Q8_0.gguf": HubFile(gguf.read_bytes())}, tags=["gguf"]))
    assert main(["pull", "acme/real-GGUF", "--list"]) == 0
    assert capsys.readouterr().out.split()[0] == "Q8_0"
    assert main(["pull", "acme/real-GGUF:Q8_0"]) == 0
    target = app_paths().models / "hub/acme/real-GGUF/real-Q8_0.gguf"
    assert str(target) in capsys.readouterr().out and target.read_bytes() == gguf.read_bytes()
    assert main(["list"]) == 0
    row = [line for line in capsys.readouterr().out.splitlines() if "Real Tiny" in line][0]
    assert "llama" in row and "Q8_0" in row and "321" in row and "downloaded" in row
    assert main(["rm", "real-Q8_0.gguf"]) == 0
    assert "Deleted 1 file(s)." in capsys.readouterr().out and not target.exists()
    assert main(["rm", "real-Q8_0.gguf"]) == 1
    assert "No model in the library matches" in capsys.readouterr().err


def test_gated_pull_error_is_one_sentence_and_the_token_never_reaches_the_log(hub, capsys, monkeypatch, caplog):
    monkeypatch.setenv("HF_TOKEN", GATED_TOKEN + "-revoked")
    caplog.set_level(logging.DEBUG)
    assert main(["pull", "meta/gated-GGUF"]) == 1
    err = capsys.readouterr().err
    assert "HTTP 403" in err and "Traceback" not in err and GATED_TOKEN not in err
    log_file = app_paths().logs / "quantdesk.log"
    logged = (log_file.read_text() if log_file.exists() else "") + caplog.text
    assert GATED_TOKEN not in logged


def test_stored_token_file_is_private_and_replaced_atomically(tmp_path):
    path = auth.store_token("hf_first")
    path.chmod(0o644)  # a wider mode left by something else is narrowed again
    auth.store_token(" hf_second \n")
    assert path.read_text() == "hf_second" and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert auth.resolve_token() == ("hf_second", str(path))
    assert "hf_second" not in auth.describe_token()
    auth.forget_token()
    assert not path.exists()
