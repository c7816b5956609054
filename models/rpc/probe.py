"""llama.cpp's RPC handshake spoken from Python: is a worker there, and does it match?

llama.cpp's RPC client aborts the whole process (``GGML_ABORT``) when it cannot connect to
a server or when the server's protocol version differs (``negotiate_hello`` in
``ggml-rpc.cpp``). So before a model loads on remote devices, the app's process does the
same handshake itself and turns each failure into a sentence naming the worker.

The wire format (``ggml-rpc.cpp``, protocol 7)::

    request:  | command (1 byte) | input size (uint64 LE) | input |
    response: | output size (uint64 LE) | output |

The first command of a connection must be ``HELLO`` (14), whose input is 24 bytes of
connection capabilities (zeros: plain TCP) and whose output is ``major, minor, patch,
padding`` followed by the server's 24 capability bytes. ``DEVICE_COUNT`` (15, no input)
answers a ``uint32``; ``GET_DEVICE_MEMORY`` (11, a ``uint32`` device index) answers free
and total bytes (two ``uint64``), which llama.cpp's default layer split follows. A worker serves one client at a time, so the probe closes its
connection at once.

Workers of protocol 3 to 6 took a ``HELLO`` without input and answered three bytes; they
close the connection on today's 24-byte one. So when a worker hangs up on the handshake,
the probe asks once more the old way, and a worker that answers that is named as another
build with its version.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from models.foundation.errors import QuantDeskError

#: The RPC protocol of the llama.cpp that QuantDesk builds (``RPC_PROTO_*_VERSION`` in
#: ``ggml-rpc.h`` of the pinned llama-cpp-python; the library exports no function for it,
#: and tests/models/test_rpc_probe.py checks it against a running worker).
PROTOCOL_VERSION = (7, 0, 0)

CMD_GET_DEVICE_MEMORY = 11
CMD_HELLO = 14
CMD_DEVICE_COUNT = 15
_CAPS_SIZE = 24  # RPC_CONN_CAPS_SIZE (transport.h)
_HELLO_REPLY = 4 + _CAPS_SIZE

#: Seconds to wait for a worker; one busy with another client never answers the hello.
DEFAULT_TIMEOUT = 5.0


@dataclass(frozen=True)
class WorkerInfo:
    """What a worker said in the handshake."""

    version: tuple[int, int, int]
    device_count: int
    #: ``(free, total)`` bytes of each of its devices.
    memory: tuple[tuple[int, int], ...] = ()

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version))


def protocol_compatible(version: tuple[int, int, int],
                        local: tuple[int, int, int] = PROTOCOL_VERSION) -> bool:
    """llama.cpp's rule (``negotiate_hello``): the same major version, a minor version not
    newer than the client's."""
    return version[0] == local[0] and version[1] <= local[1]


def _exchange(sock: socket.socket, command: int, payload: bytes, reply_size: int) -> bytes:
    sock.sendall(struct.pack("<BQ", command, len(payload)) + payload)
    size = struct.unpack("<Q", _read_exact(sock, 8))[0]
    if size != reply_size:
        raise ValueError(f"answered {size} bytes instead of {reply_size}")
    return _read_exact(sock, size)


def _read_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed the connection")
        data += chunk
    return data


def _legacy_version(host: str, port: int, timeout: float) -> tuple[int, int, int] | None:
    """The version an older worker (a ``HELLO`` without input) answers, or ``None``."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack("<BQ", CMD_HELLO, 0))
            size = struct.unpack("<Q", _read_exact(sock, 8))[0]
            if not 3 <= size <= 64:
                return None
            reply = _read_exact(sock, size)
            return reply[0], reply[1], reply[2]
    except (OSError, struct.error):
        return None


def _mismatch(name: str, version: tuple[int, int, int]) -> QuantDeskError:
    local = ".".join(map(str, PROTOCOL_VERSION))
    return QuantDeskError(
        f"The worker {name} is another build of llama.cpp: it speaks RPC protocol "
        f"{'.'.join(map(str, version))} and this QuantDesk speaks {local}, so they "
        "cannot work together.",
        "Install the same QuantDesk version on both computers (`quantdesk worker` "
        "prints its build when it starts), or remove the worker from the remote devices.")


def probe_worker(host: str, port: int, name: str, timeout: float = DEFAULT_TIMEOUT) -> WorkerInfo:
    """Do the handshake with the worker at ``host:port`` and count its devices.

    Args:
        host: Address to connect to (for a tunnel: this computer's end).
        port: Its port.
        name: The worker as the user wrote it, for sentences.
        timeout: Seconds for connecting and for each answer.

    Raises:
        QuantDeskError: Nothing listens there, it does not answer (busy with another
            client, or a firewall), it does not speak llama.cpp's RPC protocol, or it
            speaks another version of it.
    """
    start = ("Start it with `quantdesk worker` on that computer (or from Settings here), "
             "check the address, or remove it from the remote devices.")
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except socket.timeout:
        raise QuantDeskError(f"The worker {name} could not be reached: no answer within "
                             f"{timeout:g} seconds.", start) from None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise QuantDeskError(f"The worker {name} could not be reached ({reason}).", start) from None
    try:
        with sock:
            sock.settimeout(timeout)
            reply = _exchange(sock, CMD_HELLO, bytes(_CAPS_SIZE), _HELLO_REPLY)
            version = (reply[0], reply[1], reply[2])
            if not protocol_compatible(version):
                raise _mismatch(name, version)
            count = struct.unpack("<I", _exchange(sock, CMD_DEVICE_COUNT, b"", 4))[0]
            memory = tuple(struct.unpack("<QQ", _exchange(sock, CMD_GET_DEVICE_MEMORY,
                                                          struct.pack("<I", index), 16))
                           for index in range(count))
    except socket.timeout:
        raise QuantDeskError(
            f"The worker {name} accepted the connection but did not answer within {timeout:g} "
            "seconds; a worker serves one program at a time, so another one may be using it.",
            "Unload the model from the other program, or restart the worker.") from None
    except ConnectionError:
        legacy = _legacy_version(host, port, timeout)
        if legacy is not None:
            raise _mismatch(name, legacy) from None
        raise QuantDeskError(
            f"The worker {name} closed the connection without answering: no worker may be "
            "running there, or a program that is not one holds its port.", start) from None
    except (OSError, ValueError, struct.error) as exc:
        raise QuantDeskError(
            f"Something answers at {name}, but not as a llama.cpp RPC worker ({exc}).",
            "Check the port: `quantdesk worker` prints the one it listens on.") from None
    if count == 0:
        raise QuantDeskError(f"The worker {name} offers no devices.",
                             "Restart it with a device (`quantdesk worker --device`).")
    return WorkerInfo(version, count, memory)
