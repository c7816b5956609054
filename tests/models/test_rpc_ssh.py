"""The ssh:// path for real: Debian's OpenSSH server on another "computer", a key made here.

The other computer is a network namespace linked to this one. Inside it run ``sshd``
(listening on its link address, accepting only the key this test makes) and a ``quantdesk
worker`` on that computer's own 127.0.0.1. From here the worker's port cannot be reached
at all — not on the link address, not on this computer's loopback — so the only way in is
the tunnel QuantDesk opens with the system's ``ssh`` for ``ssh://root@ADDRESS``.
"""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from models.engine import ChatOptions, EngineClient, LoadSettings
from models.foundation.errors import QuantDeskError
from models.rpc.devices import rpc_available
from models.rpc.probe import probe_worker
from models.rpc.tunnel import SSH_COMMAND_ENV
from tests.models.rpc_hosts import Host, Worker, netns_available

pytestmark = [pytest.mark.smollm2, pytest.mark.skipif(
    not rpc_available(), reason="this llama.cpp was built without GGML_RPC")]

SSHD = "/usr/sbin/sshd"
QUESTION = [{"role": "user", "content": "Say hello in French, then in Spanish."}]
GREEDY = ChatOptions(temperature=0.0, max_tokens=32)


@pytest.fixture
def ssh_computer(tmp_path, monkeypatch):
    """A host with sshd and a loopback-only worker; yields (host, worker)."""
    reason = netns_available()
    if reason:
        pytest.skip(reason)
    if not (shutil.which("ssh") and shutil.which("ssh-keygen") and shutil.which(SSHD)):
        pytest.skip("needs OpenSSH's client and server (apt-get install openssh-server)")
    key, host_key = tmp_path / "id_ed25519", tmp_path / "host_ed25519"
    for path in (key, host_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    (tmp_path / "authorized_keys").write_text(key.with_suffix(".pub").read_text())
    host = Host()
    config = tmp_path / "sshd_config"
    config.write_text(
        f"ListenAddress {host.address}\nPort 22\nHostKey {host_key}\n"
        f"AuthorizedKeysFile {tmp_path}/authorized_keys\nPidFile {tmp_path}/sshd.pid\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "PermitRootLogin prohibit-password\nStrictModes no\nAllowTcpForwarding local\n")
    subprocess.run(["mkdir", "-p", "/run/sshd"], check=True)
    sshd = subprocess.Popen(host.command([SSHD, "-D", "-e", "-f", str(config)]),
                            stderr=open(tmp_path / "sshd.log", "wb"))
    worker = None
    try:
        deadline = time.monotonic() + 30
        while not host.listening(22):
            assert sshd.poll() is None, (tmp_path / "sshd.log").read_text()
            assert time.monotonic() < deadline, "sshd did not start"
            time.sleep(0.1)
        worker = Worker(tmp_path / "worker", host, listen="127.0.0.1", port=50052)
        monkeypatch.setenv(SSH_COMMAND_ENV, f"ssh -F /dev/null -i {key} -o IdentitiesOnly=yes "
                                            f"-o UserKnownHostsFile={tmp_path}/known_hosts "
                                            "-o StrictHostKeyChecking=accept-new")
        yield host, worker
    finally:
        if worker is not None:
            worker.stop()
        sshd.terminate()
        sshd.wait(timeout=10)
        host.remove()


def test_a_model_split_through_an_ssh_tunnel(smollm2_gguf, ssh_computer):
    host, worker = ssh_computer
    # The worker listens on that computer's loopback only: nothing reaches it from here.
    for address in (host.address, "127.0.0.1"):
        with pytest.raises(QuantDeskError, match="could not be reached"):
            probe_worker(address, 50052, f"{address}:50052", timeout=2)
    entry = f"ssh://root@{host.address}"
    with EngineClient() as client:
        client.load(smollm2_gguf, LoadSettings(threads=2, context_length=512, gpu_layers=0))
        local = client.chat(QUESTION, GREEDY).wait()
        report = client.load(smollm2_gguf, LoadSettings(threads=2, context_length=512,
                                                        gpu_layers=12, remote_devices=(entry,)))
        tunnel = client._remote.workers[0].tunnel
        assert tunnel is not None and tunnel.alive()
        assert client.remote_endpoints == [tunnel.endpoint]
        assert report.offload.layers_by_device == {"CPU": 19, "RPC0": 12}
        assert report.offload.device_labels == {"RPC0": entry}  # the entry, not the tunnel's port
        assert client.chat(QUESTION, GREEDY).wait().text == local.text
        client.unload()
        assert not tunnel.alive()  # the tunnel closes with the model


def test_a_login_ssh_refuses_is_a_sentence(smollm2_gguf, ssh_computer):
    host, _ = ssh_computer
    with EngineClient() as client:
        with pytest.raises(QuantDeskError) as info:
            client.load(smollm2_gguf, LoadSettings(gpu_layers=5,
                                                   remote_devices=(f"ssh://nobody@{host.address}",)))
    assert f"The SSH tunnel to ssh://nobody@{host.address} could not be opened" in info.value.what
    assert "Permission denied" in info.value.what
    assert "without a password prompt" in info.value.fix
