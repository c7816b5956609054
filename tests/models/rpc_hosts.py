"""Workers for the RPC tests: real ``quantdesk worker`` processes, as separate hosts.

Where the tests run as root with ``ip netns`` (Linux network namespaces), each worker
gets a namespace of its own joined to this one by a veth pair: a host with its own
address (``10.77.N.2``), its own loopback and its own ports, reachable from here only
through that link — as another computer on a LAN is. Elsewhere workers run on this
computer's loopback, and tests that need separate hosts skip with the reason.

Also here: llama.cpp's RPC server compiled with another protocol version (a worker "of
another build"), from the llama.cpp sources that ``/work/llama-tools`` (or
``QUANTDESK_LLAMA_TOOLS``) unpacked, linked to that build's ggml libraries.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from tests.conftest import REPO_ROOT, cached_models_dir

_NAMES = itertools.count()


def netns_available() -> Optional[str]:
    """``None`` when network namespaces can be made here, else why not."""
    if sys.platform != "linux":
        return "network namespaces are Linux's"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    if shutil.which("ip") is None:
        return "the ip program (iproute2) is missing"
    probe = f"qdprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.decode().strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


class Host:
    """A network namespace linked to this one: ``address`` is its end of the link."""

    def __init__(self) -> None:
        index = next(_NAMES) + (os.getpid() % 50) * 4
        self.name = f"qd{os.getpid()}h{index}"
        subnet = 10 + index % 240
        self.address = f"10.77.{subnet}.2"
        self._local_link = f"qdv{os.getpid() % 10000}{index}"
        run = lambda *a: subprocess.run(a, check=True, capture_output=True)  # noqa: E731
        run("ip", "netns", "add", self.name)
        try:
            run("ip", "link", "add", self._local_link, "type", "veth", "peer", "name", "eth0",
                "netns", self.name)
            run("ip", "addr", "add", f"10.77.{subnet}.1/24", "dev", self._local_link)
            run("ip", "link", "set", self._local_link, "up")
            run("ip", "netns", "exec", self.name, "ip", "addr", "add", f"{self.address}/24", "dev", "eth0")
            run("ip", "netns", "exec", self.name, "ip", "link", "set", "eth0", "up")
            run("ip", "netns", "exec", self.name, "ip", "link", "set", "lo", "up")
        except BaseException:
            self.remove()
            raise

    def command(self, args: list[str]) -> list[str]:
        """``args`` run inside this host."""
        return ["ip", "netns", "exec", self.name, *args]

    def listening(self, port: int) -> bool:
        """Whether something listens on TCP ``port`` inside this host."""
        out = subprocess.run(self.command(["ss", "-ltnH", f"sport = :{port}"]),
                             capture_output=True, text=True).stdout
        return bool(out.strip())

    def remove(self) -> None:
        subprocess.run(["ip", "link", "del", self._local_link], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Worker:
    """A ``quantdesk worker`` process (in ``host``, or on this computer's loopback).

    Args:
        home: QUANTDESK_HOME of the worker (its cache of received weights).
        host: The namespace to run in; ``None``: this computer.
        listen: Address to listen on (default: loopback of wherever it runs).
        port: TCP port (default: a free one).
        program: Another RPC server's command (llama.cpp's ``rpc-server`` options).
        threads: The worker's CPU threads.
    """

    def __init__(self, home: Path, host: Optional[Host] = None, listen: str = "127.0.0.1",
                 port: Optional[int] = None, program: Optional[list[str]] = None,
                 threads: int = 1) -> None:
        self.host = host
        self.port = port or free_port()
        self.listen = listen
        args = program or [sys.executable, "-m", "app.cli", "worker", "--threads", str(threads),
                           "--no-cache"]
        args = args + ["--host", listen, "--port", str(self.port)] if program is None else \
            args + ["-H", listen, "-p", str(self.port)]
        env = dict(os.environ, QUANTDESK_HOME=str(home), PYTHONPATH=str(REPO_ROOT))
        self.log = home / f"worker-{self.port}.log"
        home.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log, "wb")
        self.process = subprocess.Popen(host.command(args) if host else args, env=env,
                                        stdout=self._log_file, stderr=subprocess.STDOUT,
                                        cwd=str(REPO_ROOT))
        self._wait_listening()

    @property
    def address(self) -> str:
        """``host:port`` as the loading side reaches it directly."""
        where = self.listen if self.listen not in ("0.0.0.0",) else self.host.address
        return f"{where}:{self.port}"

    def _wait_listening(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the worker exited: {self.output()}")
            if self.host is not None:
                if self.host.listening(self.port):
                    return
            else:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    return
                except OSError:
                    pass
            time.sleep(0.2)
        raise RuntimeError(f"the worker did not listen within {timeout} s: {self.output()}")

    def output(self) -> str:
        self._log_file.flush()
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        """End it at once, as a computer switched off would (SIGKILL)."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log_file.close()


def llama_sources() -> Optional[Path]:
    """The unpacked llama.cpp of the llama-tools cache (``vendor/llama.cpp``), if any."""
    roots = [os.environ.get("QUANTDESK_LLAMA_TOOLS"), "/work/llama-tools",
             str(Path.home() / ".cache" / "quantdesk-llama-tools")]
    for root in filter(None, roots):
        for source in sorted(Path(root, "src").glob("llama_cpp_python-*/vendor/llama.cpp")):
            if (Path(root) / "build" / "bin" / "libggml-base.so").exists():
                return source
    return None


def other_protocol_server() -> Path:
    """llama.cpp's ``rpc-server`` compiled with the RPC protocol's major version + 1: a
    worker of another llama.cpp build. Compiled once (about a minute) into the test
    models' cache; needs g++ and the llama-tools cache's sources and libraries.

    Raises:
        RuntimeError: Those are missing (the caller skips).
    """
    source = llama_sources()
    if source is None or shutil.which("g++") is None:
        raise RuntimeError("needs g++ and the llama-tools cache (tests/benchmarks/llama_tools.py)")
    libs = source.parents[3] / "build" / "bin"  # <cache>/src/<sdist>/vendor/llama.cpp
    header = (source / "ggml/include/ggml-rpc.h").read_text()
    major = int(header.split("RPC_PROTO_MAJOR_VERSION")[1].split()[0])
    target = cached_models_dir() / f"rpc-server-protocol-{major + 1}" / "rpc-server"
    if target.exists():
        return target
    include = target.parent / "include"
    include.mkdir(parents=True, exist_ok=True)
    (include / "ggml-rpc.h").write_text(header.replace(
        f"RPC_PROTO_MAJOR_VERSION    {major}", f"RPC_PROTO_MAJOR_VERSION    {major + 1}"))
    rpc = source / "ggml/src/ggml-rpc"
    subprocess.run(
        ["g++", "-O1", "-std=c++17", f"-I{include}", f"-I{source}/ggml/include",
         f"-I{source}/ggml/src", f"-I{rpc}", str(rpc / "ggml-rpc.cpp"), str(rpc / "transport.cpp"),
         str(source / "tools/rpc/rpc-server.cpp"), f"-L{libs}", f"-Wl,-rpath,{libs}",
         "-lggml", "-lggml-base", "-lggml-cpu", "-lpthread", "-o", str(target.with_suffix(".part"))],
        check=True, capture_output=True)
    target.with_suffix(".part").rename(target)
    return target


@contextlib.contextmanager
def workers_on_hosts(home: Path, count: int, separate_hosts: bool, threads: int = 1):
    """``count`` workers, each in a host of its own (``separate_hosts``) listening on its
    link address and port 50052, or on this computer's loopback; stopped and removed after."""
    hosts = [Host() for _ in range(count)] if separate_hosts else [None] * count
    workers: list[Worker] = []
    try:
        for host in hosts:
            workers.append(Worker(home, host, listen=host.address if host else "127.0.0.1",
                                  port=50052 if host else None, threads=threads))
        yield workers
    finally:
        for worker in workers:
            worker.stop()
        for host in hosts:
            if host:
                host.remove()
