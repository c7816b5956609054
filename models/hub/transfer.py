"""Moving one file's bytes from the Hub to disk: resumable, verified, cancellable.

Why not ``hf_hub_download``: it resumes only inside its own cache layout, checks the
size but not the sha256 of what arrived, has no way to stop it from another thread
(pause/cancel) short of killing the process, and reports progress through tqdm. So the
byte transfer is ours, and everything else stays the client's: the URL (``hf_hub_url``),
where the bytes are and what they hash to (``get_hf_file_metadata``: a HEAD on the resolve
URL, whose ``X-Linked-Etag`` must equal the tree API's LFS sha256), the headers and token
(``build_hf_headers``), the HTTP session with its redirects and proxies (``get_session``).

The GET goes to the location the HEAD reported (the Hub's CDN for large files), with the
token only when that location is the Hub itself. A file in progress lives beside its
target as ``.NAME.part`` with a JSON sidecar ``.NAME.download.json`` naming the remote blob
(sha256 or git blob id, size). A restart — also after the process was killed — hashes the
part already on disk and asks for the rest with ``Range: bytes=N-``. Only a file whose
hash matches is renamed to its real name, so the library never shows an unverified file.

Network faults (refused or dropped connection, timeout, 5xx, 429) are retried with
exponential backoff (``Retry-After`` honoured); the failure count resets whenever bytes
arrive. Cancelling stops the transfer at once, also while a request waits for the Hub or
a backoff runs. An expired CDN URL (401/403/404 from the CDN) is replaced by asking the Hub
again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urljoin, urlsplit
from typing import Callable, Optional

import httpx2
from huggingface_hub import get_hf_file_metadata, hf_hub_url
from huggingface_hub.errors import (
    GatedRepoError, HfHubHTTPError, RemoteEntryNotFoundError, RepositoryNotFoundError,
)
from huggingface_hub.utils import build_hf_headers, get_session

from models.foundation.errors import QuantDeskError
from models.foundation.jobs import CancelToken, check, replace_file
from models.hub.auth import hub_endpoint
from models.hub.client import error_for_status, hub_errors
from models.hub.session import cancellable

CHUNK = 1 << 20
FLUSH_SECONDS = 0.25
_SAFE_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+@=,()\[\] -]{0,199}$")
_WINDOWS_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)),
                     *(f"LPT{i}" for i in range(1, 10))}


@dataclass(frozen=True)
class RemoteFile:
    """A file of a repo at a commit, with what it must hash to."""

    repo_id: str
    commit: str
    path: str
    size: int
    sha256: Optional[str]  # LFS files
    blob_id: str  # git blob sha1: what small files are checked against

    @property
    def label(self) -> str:
        return f"{self.repo_id}/{self.path}"


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try: consecutive failures allowed and backoff bounds (seconds)."""

    max_failures: int = 8
    base_wait: float = 1.0
    max_wait: float = 30.0
    max_retry_after: float = 300.0
    read_timeout: float = 30.0


class _Retry(Exception):
    """Internal: this attempt failed in a way worth another try, after ``wait`` seconds."""

    def __init__(self, reason: str, wait: Optional[float] = None) -> None:
        super().__init__(reason)
        self.wait = wait


def safe_relative_path(*names: str) -> PurePosixPath:
    """Join repo ids and Hub file names into a relative path that cannot escape a folder.

    Every component must be a plain name — letters, digits and ``._+@=,()[] -``,
    starting with a letter or digit (so no ``..``, no hidden files), no drive or
    absolute path, no backslash or control character, no Windows device name.

    Raises:
        QuantDeskError: A component is unsafe; nothing is written.
    """
    parts: list[str] = []
    for name in names:
        for part in name.split("/"):
            stem = part.split(".")[0].upper()
            if (not _SAFE_PART.match(part) or part.endswith((".", " ")) or stem in _WINDOWS_RESERVED):
                raise QuantDeskError(
                    f"The Hub listed a file name QuantDesk will not write: {name!r}.",
                    "The repo may be malicious or broken; download from another repo.")
            parts.append(part)
    if not parts:
        raise QuantDeskError("An empty file name was given for a download.")
    return PurePosixPath(*parts)


def local_target(models_dir: Path, repo_id: str, path_in_repo: str) -> Path:
    """Where ``path_in_repo`` of ``repo_id`` is stored: ``models/hub/OWNER/NAME/PATH``."""
    root = Path(models_dir).resolve()
    target = (root / "hub" / safe_relative_path(repo_id, path_in_repo)).resolve()
    if not target.is_relative_to(root):  # belt and braces: symlinks inside the folder
        raise QuantDeskError(f"{path_in_repo!r} would be written outside the models folder {root}.")
    return target


def part_path(target: Path) -> Path:
    """The partial data of ``target`` while it downloads."""
    return target.with_name(f".{target.name}.part")


def sidecar_path(target: Path) -> Path:
    """The JSON describing which remote file ``part_path(target)`` belongs to."""
    return target.with_name(f".{target.name}.download.json")


def discard_partial(target: Path) -> None:
    """Remove a download's partial data and sidecar (cancel, or a changed remote file)."""
    for path in (part_path(target), sidecar_path(target)):
        path.unlink(missing_ok=True)


def read_sidecar(target: Path) -> Optional[RemoteFile]:
    """The remote file a partial download belongs to, or ``None`` if unknown/corrupt."""
    try:
        return RemoteFile(**json.loads(sidecar_path(target).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def _write_sidecar(target: Path, remote: RemoteFile) -> None:
    tmp = target.with_name(f".{target.name}.download.tmp")
    tmp.write_text(json.dumps(asdict(remote)), encoding="utf-8")
    os.replace(tmp, sidecar_path(target))


def _new_hasher(remote: RemoteFile):
    if remote.sha256:
        return hashlib.sha256()
    hasher = hashlib.sha1()  # git's blob id: sha1("blob <size>\0" + content)
    hasher.update(b"blob %d\0" % remote.size)
    return hasher


def _expected_digest(remote: RemoteFile) -> str:
    return (remote.sha256 or remote.blob_id).lower()


def _hash_existing(part: Path, hasher, cancel: Optional[CancelToken]) -> int:
    """Feed the bytes already on disk to ``hasher``; return their count."""
    done = 0
    with open(part, "rb") as fh:
        while block := fh.read(8 * CHUNK):
            hasher.update(block)
            done += len(block)
            check(cancel)
    return done


def _same_origin(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme, pa.hostname, pa.port) == (pb.scheme, pb.hostname, pb.port)


def _backoff(policy: RetryPolicy, failures: int, hint: Optional[float]) -> float:
    if hint is not None:
        return min(hint, policy.max_retry_after)
    return min(policy.max_wait, policy.base_wait * 2 ** (failures - 1))


def fetch_file(remote: RemoteFile, target: Path, token: Optional[str],
               on_bytes: Optional[Callable[[int], None]] = None,
               cancel: Optional[CancelToken] = None,
               policy: RetryPolicy = RetryPolicy(),
               on_retry: Optional[Callable[[str, float], None]] = None) -> Path:
    """Download ``remote`` to ``target``, resuming a partial download of the same blob.

    Args:
        remote: The file and the hash it must have.
        target: Final path (from :func:`local_target`).
        token: Hub token or ``None``.
        on_bytes: Called with each count of bytes that reached the disk (also the
            bytes found already on disk when resuming, so progress starts there).
        cancel: Stops the transfer at the next chunk; the partial data is kept, so the
            caller decides between pause (keep) and cancel (:func:`discard_partial`).
        policy: Retry limits.
        on_retry: Called with the reason and the seconds to wait before each automatic
            retry, so a queue can show "retrying" as a state.

    Raises:
        Cancelled: ``cancel`` was set.
        QuantDeskError: Access refused, file missing, too many failures, disk full, or
            the bytes did not hash to the Hub's value (the partial data is then deleted).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    known = read_sidecar(target)
    if known is None or _expected_digest(known) != _expected_digest(remote) or known.size != remote.size:
        part_path(target).unlink(missing_ok=True)  # another blob (repo updated) or no record
    _write_sidecar(target, remote)
    transfer = _Transfer(remote, part_path(target), token, on_bytes, cancel, policy)
    transfer.on_retry = on_retry
    transfer.run()
    if transfer.hasher.hexdigest().lower() != _expected_digest(remote):
        discard_partial(target)
        kind = "sha256" if remote.sha256 else "git blob id"
        raise QuantDeskError(
            f"The downloaded {remote.label} does not match the Hub's {kind}, so it was deleted.",
            "Download it again; if this repeats, the connection or a proxy alters the data.")
    replace_file(transfer.part, target)
    sidecar_path(target).unlink(missing_ok=True)
    return target


class _Transfer:
    """The state of one file's transfer across attempts: bytes on disk and their hash."""

    def __init__(self, remote: RemoteFile, part: Path, token: Optional[str],
                 on_bytes: Optional[Callable[[int], None]], cancel: Optional[CancelToken],
                 policy: RetryPolicy) -> None:
        self.remote, self.part, self.token = remote, part, token
        self.on_bytes, self.cancel, self.policy = on_bytes, cancel, policy
        self.on_retry: Optional[Callable[[str, float], None]] = None
        self.url = hf_hub_url(remote.repo_id, remote.path, revision=remote.commit, endpoint=hub_endpoint())
        self.location: Optional[str] = None  # where the bytes are (the CDN), from the metadata
        self.hasher = _new_hasher(remote)
        self.offset = _hash_existing(part, self.hasher, cancel) if part.exists() else 0
        if self.offset > remote.size:
            self.restart()
        if on_bytes and self.offset:
            on_bytes(self.offset)

    def restart(self) -> None:
        """Throw away the partial data and start from byte 0."""
        self.part.unlink(missing_ok=True)
        self.hasher, self.offset = _new_hasher(self.remote), 0

    def run(self) -> None:
        """Attempt until every byte is on disk, backing off between failed attempts."""
        failures = 0
        # Cancelling also stops a request that waits for the Hub (a HEAD, a stalled read).
        with cancellable(self.cancel), ThreadPoolExecutor(1, thread_name_prefix="quantdesk-hash") as sink_pool:
            while self.offset < self.remote.size:
                check(self.cancel)
                before = self.offset
                try:
                    self._attempt(sink_pool)
                except _Retry as retry:
                    failures = (0 if self.offset > before else failures) + 1
                    if failures > self.policy.max_failures:
                        raise QuantDeskError(
                            f"Downloading {self.remote.label} failed {failures} times in a row ({retry}).",
                            "Check the connection and run the download again; it resumes where it stopped.",
                        ) from retry
                    wait = _backoff(self.policy, failures, retry.wait)
                    if self.on_retry is not None:
                        self.on_retry(str(retry), wait)
                    if self.cancel is not None:
                        self.cancel.wait(wait)
                    else:
                        time.sleep(wait)

    def _locate(self) -> str:
        """Ask the Hub (HEAD on the resolve URL) where the bytes are, and check they are ours.

        The Hub answers large files with a redirect to its CDN (a signed URL); fetching
        that location directly saves a redirect per attempt, keeps the token off the CDN,
        and the ``X-Linked-Etag`` tells whether the file changed since it was listed.
        """
        if self.location is None:
            with hub_errors(self.remote.label):
                meta = get_hf_file_metadata(self.url, token=self.token or False, retry_on_errors=True)
            if meta.etag and meta.etag.lower() != _expected_digest(self.remote):
                raise QuantDeskError(
                    f"{self.remote.label} changed on the Hub since it was listed.",
                    "Run the download again to fetch the current version.")
            self.location = urljoin(self.url, meta.location)
        return self.location

    def _attempt(self, sink_pool: ThreadPoolExecutor) -> None:
        """One GET from ``self.offset``; raises :class:`_Retry` for transient failures."""
        try:
            location = self._locate()
        except QuantDeskError as exc:
            if isinstance(exc.__cause__, (httpx2.TransportError, HfHubHTTPError)) and not isinstance(
                    exc.__cause__, (RepositoryNotFoundError, GatedRepoError, RemoteEntryNotFoundError)):
                status = getattr(getattr(exc.__cause__, "response", None), "status_code", 0) or 0
                if status in (0, 408, 429) or status >= 500:
                    raise _Retry(str(exc)) from exc
            raise
        on_hub = _same_origin(location, self.url)
        # The token goes to the Hub only, never to the CDN host it redirects to.
        headers = build_hf_headers(token=(self.token or False) if on_hub else False)
        headers["Accept-Encoding"] = "identity"  # sizes and ranges are about the stored bytes
        if self.offset:
            headers["Range"] = f"bytes={self.offset}-"
        timeout = httpx2.Timeout(self.policy.read_timeout, connect=min(10.0, self.policy.read_timeout))
        pending: Optional[Future] = None
        try:
            with get_session().stream("GET", location, headers=headers, timeout=timeout) as response:
                status = response.status_code
                if status == 416:  # our part is no prefix of this file any more
                    self.restart()
                    raise _Retry("the server refused the resume range", wait=0)
                if status in (408, 429) or status >= 500:
                    after = response.headers.get("Retry-After", "")
                    raise _Retry(f"HTTP {status}", wait=float(after) if after.isdigit() else None)
                if status in (401, 403, 404) and location != self.url:
                    self.location = None  # a signed CDN URL expired: ask the Hub for a new one
                    raise _Retry(f"HTTP {status} from the CDN", wait=0)
                if status >= 400:
                    raise error_for_status(status, self.remote.label, response.headers.get("Retry-After"))
                if self.offset and (status != 206 or not response.headers.get("Content-Range", "")
                                    .startswith(f"bytes {self.offset}-")):
                    self.restart()  # the server ignored Range: take the whole body
                with open(self.part, "ab") as fh:
                    hasher, on_bytes = self.hasher, self.on_bytes

                    def digest(blocks: list[bytes], n_bytes: int) -> None:
                        # Runs beside the socket reads and writes (sha256 frees the GIL).
                        hasher.update(b"".join(blocks))  # one call: one GIL hand-off per batch
                        if on_bytes:
                            on_bytes(n_bytes)

                    # Each piece is written as the socket delivers it (as a plain client
                    # does) and hashed in ~1 MiB batches on the other thread, one batch in
                    # flight, so the two costs overlap and memory stays flat. Progress is
                    # reported every batch (or every FLUSH_SECONDS on a slow link); what
                    # arrived before a dropped connection is on disk and hashed.
                    pieces: list[bytes] = []
                    buffered = 0
                    last_flush = time.monotonic()
                    too_long = False

                    def flush() -> None:
                        nonlocal pending, pieces, buffered, last_flush
                        if pending is not None:
                            pending.result()
                        pending = sink_pool.submit(digest, pieces, buffered) if pieces else None
                        pieces, buffered, last_flush = [], 0, time.monotonic()

                    # Raw bytes when the server honoured "identity" (the decoder's copies
                    # cost ~15% CPU); decoded ones if it compressed the body anyway.
                    identity = response.headers.get("Content-Encoding", "identity") == "identity"
                    try:
                        for piece in (response.iter_raw() if identity else response.iter_bytes()):
                            check(self.cancel)
                            if self.offset + len(piece) > self.remote.size:
                                too_long = True  # the part restarts once the file is closed
                                break
                            fh.write(piece)
                            self.offset += len(piece)
                            pieces.append(piece)
                            buffered += len(piece)
                            if buffered >= CHUNK or time.monotonic() - last_flush > FLUSH_SECONDS:
                                flush()
                    finally:
                        flush()
                        if pending is not None:  # hashed before the file closes, even on errors
                            pending, done = None, pending
                            done.result()
                if too_long:
                    self.restart()
                    raise _Retry("the server sent more bytes than the file has")
            if self.offset < self.remote.size:
                raise _Retry("the connection ended early")
        except httpx2.TransportError as exc:
            raise _Retry(f"{type(exc).__name__}: {exc}") from exc
        except OSError as exc:
            raise QuantDeskError(f"Writing {self.part.parent} failed ({exc.strerror}).",
                                 "Free some disk space, then resume the download.") from exc
