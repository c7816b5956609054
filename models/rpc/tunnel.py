"""SSH tunnels to workers on other computers, with the system's ``ssh``.

For an ``ssh://user@host`` remote device, QuantDesk runs::

    ssh -N -L 127.0.0.1:LOCAL:127.0.0.1:WORKER_PORT -o BatchMode=yes
        -o ExitOnForwardFailure=yes -o ServerAliveInterval=15 [-p SSH_PORT] user@host

and gives llama.cpp ``127.0.0.1:LOCAL`` as the worker's address. The worker listens on
its own computer's loopback only, so nothing but an SSH login can reach it, and the
traffic is encrypted. ``BatchMode`` makes ssh fail instead of asking for a password the
app cannot type: the login must work with a key (or an agent), as ``ssh user@host``
does in a terminal. ``QUANTDESK_SSH_COMMAND`` replaces ``ssh`` (e.g. ``ssh -F my_config``
or ``ssh -i key``), as ``GIT_SSH_COMMAND`` does for git.

A tunnel lives as long as the model that uses it; :meth:`SshTunnel.close` ends ssh.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import tempfile
import time
from typing import Optional

from models.foundation.errors import QuantDeskError
from models.foundation.system_programs import find_program, system_environment
from models.rpc.endpoints import RemoteDevice
from models.rpc.probe import DEFAULT_TIMEOUT, WorkerInfo, probe_worker

SSH_COMMAND_ENV = "QUANTDESK_SSH_COMMAND"

#: Seconds for ssh to log in and open the forward.
CONNECT_TIMEOUT = 30.0


def ssh_command() -> list[str]:
    """The ssh program and its fixed arguments (``QUANTDESK_SSH_COMMAND`` or ``ssh``).

    Raises:
        QuantDeskError: No ssh program is installed.
    """
    words = shlex.split(os.environ.get(SSH_COMMAND_ENV, "") or "ssh")
    program = find_program(words[0]) if not os.path.isabs(words[0]) else words[0]
    if program is None:
        raise QuantDeskError(
            "An ssh:// remote device needs the ssh program, and this computer has none.",
            "Install OpenSSH's client (on Debian and Ubuntu: `sudo apt install "
            "openssh-client`), or list the worker as HOST:PORT on a network you trust.")
    return [program, *words[1:]]


def free_local_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class SshTunnel:
    """A running ``ssh -L`` to one worker; its local end is ``127.0.0.1:local_port``.

    Args:
        device: An ``ssh://`` remote device.
        timeout: Seconds for the login and the forward.

    Raises:
        QuantDeskError: ssh is missing, the login failed (with ssh's own words), or the
            worker does not answer at the other end.
    """

    def __init__(self, device: RemoteDevice, timeout: float = CONNECT_TIMEOUT) -> None:
        self.device = device
        self.local_port = free_local_port()
        self.info: Optional[WorkerInfo] = None
        args = ssh_command() + [
            "-N", "-L", f"127.0.0.1:{self.local_port}:127.0.0.1:{device.port}",
            "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes",
            "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=3",
            "-o", f"ConnectTimeout={int(timeout)}",
        ]
        if device.ssh_port is not None:
            args += ["-p", str(device.ssh_port)]
        args.append(device.ssh_destination)
        self._stderr = tempfile.TemporaryFile()
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=self._stderr, env=system_environment(),
                                        start_new_session=True)
        try:
            self.info = self._wait_ready(timeout)
        except BaseException:
            self.close()
            raise

    @property
    def endpoint(self) -> str:
        """The address llama.cpp connects to."""
        return f"127.0.0.1:{self.local_port}"

    def _ssh_words(self) -> str:
        self._stderr.seek(0)
        lines = [line.strip() for line in self._stderr.read().decode(errors="replace").splitlines()
                 if line.strip() and not line.startswith("Warning: Permanently added")]
        return lines[-1] if lines else f"ssh exited with status {self.process.returncode}"

    def _wait_ready(self, timeout: float) -> WorkerInfo:
        """Probe the worker through the tunnel until it answers, ssh fails, or time runs out."""
        deadline = time.monotonic() + timeout
        name = self.device.text
        while True:
            if self.process.poll() is not None:
                raise QuantDeskError(
                    f"The SSH tunnel to {name} could not be opened: {self._ssh_words()}.",
                    f"Check that `ssh {self.device.ssh_destination}` logs in without a password "
                    "prompt (a key or an agent), then try again.")
            try:
                socket.create_connection(("127.0.0.1", self.local_port), timeout=1).close()
            except OSError:  # ssh has not opened its end yet
                if time.monotonic() > deadline:
                    raise QuantDeskError(f"The SSH tunnel to {name} did not open within "
                                         f"{timeout:g} seconds.",
                                         "Check the computer's address and that it is on.")
                time.sleep(0.1)
                continue
            return probe_worker("127.0.0.1", self.local_port,
                                f"{name} (port {self.device.port} on {self.device.host})",
                                timeout=DEFAULT_TIMEOUT)

    def alive(self) -> bool:
        """Whether ssh still runs."""
        return self.process.poll() is None

    def close(self) -> None:
        """End ssh (and with it the forward)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self._stderr.close()
