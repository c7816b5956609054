"""A local stand-in for the Hugging Face Hub that the real ``huggingface_hub`` client talks to.

It answers the endpoints and headers QuantDesk uses, as huggingface.co does:

- ``GET /api/models`` with ``search``, ``filter``, ``author``, ``sort``, ``limit``,
  ``expand``; pages are linked with a ``Link: <...>; rel="next"`` header (cursor).
- ``GET /api/models/{repo}`` and ``/api/models/{repo}/revision/{rev}`` (``blobs=True``
  adds sizes and LFS info to ``siblings``).
- ``GET /api/models/{repo}/tree/{rev}[/{path}]?recursive=...``.
- ``GET /api/whoami-v2``: the account name of a known token.
- ``HEAD``/``GET /{repo}/resolve/{rev}/{file}``: ``X-Repo-Commit``, ``ETag`` (git blob
  sha1, or sha256 for LFS files), ``X-Linked-Etag``/``X-Linked-Size`` for LFS files,
  which redirect (302) to a content-addressed ``/cdn/{sha256}`` like the Hub's CDN;
  ``Range`` → 206 with ``Content-Range``; ``X-Error-Code`` on 401/403/404.

Faults a test can switch on (:class:`Faults`): drop the connection after N bytes of a
file, serve wrong bytes, answer 429 with ``Retry-After``, throttle the transfer rate.
Every request is logged in :attr:`HubState.requests` so tests can see ``Range`` headers.

Run alone (``python -m tests.models.hub_server FILE...``) it serves the given files as
repo ``bench/files`` and prints its URL: the download benchmark uses that.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional, Union
from urllib.parse import parse_qs, quote, unquote, urlsplit

LFS_THRESHOLD = 1024  # files at least this big are "LFS" files, like the Hub's large files


@dataclass
class HubFile:
    """A file in a fake repo: its bytes in memory, or a path on disk for big files."""

    content: Union[bytes, Path]
    declared_size: Optional[int] = None  # what the API claims (a huge model for disk checks)

    @property
    def size(self) -> int:
        if self.declared_size is not None:
            return self.declared_size
        return len(self.content) if isinstance(self.content, bytes) else self.content.stat().st_size

    def read(self) -> bytes:
        return self.content if isinstance(self.content, bytes) else self.content.read_bytes()

    @property
    def sha256(self) -> str:
        if not hasattr(self, "_sha256"):
            self._sha256 = hashlib.sha256(self.read()).hexdigest()
        return self._sha256

    @property
    def git_sha1(self) -> str:
        if not hasattr(self, "_git_sha1"):  # computed once: the Hub answers HEAD without hashing
            data = self.read()
            self._git_sha1 = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        return self._git_sha1

    @property
    def is_lfs(self) -> bool:
        return self.size >= LFS_THRESHOLD


@dataclass
class HubRepo:
    """A fake model repo with the fields the Hub's model API returns."""

    repo_id: str
    files: dict[str, HubFile]
    sha: str = "0123456789abcdef0123456789abcdef01234567"
    downloads: int = 0
    likes: int = 0
    last_modified: str = "2025-01-01T00:00:00.000Z"
    tags: list[str] = field(default_factory=list)
    gated: Union[bool, str] = False
    private: bool = False
    config: Optional[dict] = None


@dataclass
class Faults:
    """Misbehaviour to inject, keyed by file path in the repo."""

    drop_after: dict[str, int] = field(default_factory=dict)  # bytes sent, then the socket closes
    drop_times: dict[str, int] = field(default_factory=dict)  # how many GETs are dropped (default 1)
    corrupt: set[str] = field(default_factory=set)  # serve the right length, wrong bytes
    extra_bytes: dict[str, int] = field(default_factory=dict)  # a longer body than listed
    rate_limited: dict[str, int] = field(default_factory=dict)  # answer 429 this many times
    retry_after: int = 1
    throttle_bytes_per_s: Optional[int] = None  # slow every file body to this rate
    api_status: Optional[int] = None  # every /api call answers this status
    api_delay: float = 0.0  # seconds every /api call waits before answering (or until the server stops)
    stall_after: dict[str, int] = field(default_factory=dict)  # bytes sent, then silence until the server stops


@dataclass
class HubState:
    """Everything the server knows; tests change it between requests."""

    repos: dict[str, HubRepo] = field(default_factory=dict)
    tokens: dict[str, set[str]] = field(default_factory=dict)  # token → repos it may read
    users: dict[str, str] = field(default_factory=dict)  # token → account name (whoami)
    faults: Faults = field(default_factory=Faults)
    requests: list[dict] = field(default_factory=list)
    page_size: int = 1000  # the Hub's own cap on one page of /api/models
    stopping: threading.Event = field(default_factory=threading.Event)  # set when the server shuts down

    def add_repo(self, repo: HubRepo) -> HubRepo:
        self.repos[repo.repo_id] = repo
        return repo


_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")
_INFO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+?)(?:/revision/(?P<rev>[^/]+))?$")
_TREE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?$")
_SORT_KEYS = {"downloads": "downloads", "likes": "likes", "lastModified": "last_modified",
              "createdAt": "last_modified", "trendingScore": "likes"}


class HubHandler(BaseHTTPRequestHandler):
    """Routes a request to the endpoint it names; ``server.state`` holds the repos."""

    protocol_version = "HTTP/1.1"  # keep-alive, as the Hub and httpx use

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    @property
    def state(self) -> HubState:
        return self.server.state  # type: ignore[attr-defined]

    # ---------------------------------------------------------------- plumbing
    def _send(self, status: int, body: bytes = b"", headers: Optional[dict] = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, payload, headers: Optional[dict] = None) -> None:
        self._send(200, json.dumps(payload).encode(), {"Content-Type": "application/json", **(headers or {})})

    def _error(self, status: int, code: str, message: str, extra: Optional[dict] = None) -> None:
        body = json.dumps({"error": message}).encode()
        self._send(status, body, {"Content-Type": "application/json", "X-Error-Code": code,
                                  "X-Error-Message": message, **(extra or {})})

    def _token(self) -> Optional[str]:
        auth = self.headers.get("Authorization", "")
        return auth[7:] if auth.startswith("Bearer ") else None

    def _may_read(self, repo: HubRepo) -> Optional[tuple[int, str]]:
        """None when allowed; else the (status, X-Error-Code) the Hub answers."""
        token = self._token()
        allowed = token is not None and repo.repo_id in self.state.tokens.get(token, set())
        if repo.private and not allowed:
            return 401, "RepoNotFound"
        if repo.gated and not allowed:
            return (401, "GatedRepo") if token is None else (403, "GatedRepo")
        return None

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        path, query = unquote(url.path), parse_qs(url.query)
        self.state.requests.append({"method": self.command, "path": path, "range": self.headers.get("Range"),
                                    "auth": self._token(), "query": query})
        if path.startswith("/api/") and self.state.faults.api_status:
            return self._error(self.state.faults.api_status, "Error", "injected API failure")
        if path.startswith("/api/") and self.state.faults.api_delay:
            # A slow Hub (the GUI must stay responsive); a request still waiting when the server
            # stops gets no answer (its client is usually long gone).
            if self.state.stopping.wait(self.state.faults.api_delay):
                self.close_connection = True
                return
        if path == "/api/whoami-v2":
            return self._whoami()
        if path == "/api/models":
            return self._search(query)
        if match := _TREE.match(path):
            return self._tree(match["repo"], match["rev"], match["path"] or "", query)
        if match := _INFO.match(path):
            return self._info(match["repo"], match["rev"], query)
        if match := _RESOLVE.match(path):
            return self._resolve(match["repo"], match["rev"], match["path"])
        if path.startswith("/cdn/"):
            return self._cdn(path[len("/cdn/"):])
        self._error(404, "NotFound", f"no route for {path}")

    # ---------------------------------------------------------------- API
    def _whoami(self) -> None:
        """``/api/whoami-v2``: the account of a known token, 401 otherwise."""
        token = self._token()
        if token is None or token not in self.state.tokens:
            return self._error(401, "Unauthorized", "Invalid credentials in Authorization header")
        self._json({"type": "user", "name": self.state.users.get(token, "test-user"), "auth": {}})

    def _summary(self, repo: HubRepo, expand: list[str]) -> dict:
        full = {"id": repo.repo_id, "modelId": repo.repo_id, "author": repo.repo_id.split("/")[0],
                "downloads": repo.downloads, "likes": repo.likes, "lastModified": repo.last_modified,
                "gated": repo.gated, "private": repo.private, "tags": repo.tags, "sha": repo.sha,
                "library_name": "gguf" if "gguf" in repo.tags else "transformers"}
        return {k: v for k, v in full.items() if not expand or k in expand or k == "id"}

    def _search(self, query: dict) -> None:
        found = list(self.state.repos.values())
        if text := query.get("search", [""])[0].lower():
            found = [r for r in found if text in r.repo_id.lower()]
        for tag in query.get("filter", []):
            found = [r for r in found if tag in r.tags]
        if author := query.get("author", [""])[0]:
            found = [r for r in found if r.repo_id.split("/")[0] == author]
        if sort := query.get("sort", [""])[0]:
            found.sort(key=lambda r: getattr(r, _SORT_KEYS[sort]), reverse=True)
        limit = min(int(query.get("limit", [self.state.page_size])[0]), self.state.page_size)
        cursor = int(query.get("cursor", ["0"])[0])
        page = found[cursor:cursor + limit]
        headers = {}
        if cursor + limit < len(found):
            rest = {k: v for k, v in query.items() if k != "cursor"}
            qs = "&".join(f"{k}={quote(x)}" for k, vs in rest.items() for x in vs)
            host = f"http://{self.headers['Host']}"
            headers["Link"] = f'<{host}/api/models?{qs}&cursor={cursor + limit}>; rel="next"'
        self._json([self._summary(r, query.get("expand", [])) for r in page], headers)

    def _repo(self, repo_id: str, rev: Optional[str]) -> Optional[HubRepo]:
        repo = self.state.repos.get(repo_id)
        if repo is None or (repo.private and self._may_read(repo)):
            self._error(404 if repo is None else 401, "RepoNotFound", "Repository not found")
            return None
        if rev not in (None, "main", repo.sha):
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return None
        return repo

    def _info(self, repo_id: str, rev: Optional[str], query: dict) -> None:
        if (repo := self._repo(repo_id, rev)) is None:
            return
        blobs = query.get("blobs", ["False"])[0].lower() == "true"
        siblings = []
        for name, f in repo.files.items():
            entry = {"rfilename": name}
            if blobs:
                entry.update(size=f.size, blobId=f.git_sha1)
                if f.is_lfs:
                    entry["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": 134}
            siblings.append(entry)
        info = self._summary(repo, [])
        info.update(siblings=siblings, createdAt=repo.last_modified)
        if repo.config is not None:
            info["config"] = repo.config
        self._json(info)

    def _tree(self, repo_id: str, rev: str, prefix: str, query: dict) -> None:
        if (repo := self._repo(repo_id, rev)) is None:
            return
        recursive = query.get("recursive", ["False"])[0].lower() == "true"
        prefix = prefix.strip("/")
        entries, folders = [], set()
        for name, f in sorted(repo.files.items()):
            if prefix and not name.startswith(prefix + "/"):
                continue
            rel = name[len(prefix) + 1:] if prefix else name
            parts = rel.split("/")
            for depth in range(1, len(parts)):
                folder = "/".join(([prefix] if prefix else []) + parts[:depth])
                if folder not in folders and (recursive or depth == 1):
                    folders.add(folder)
                    entries.append({"type": "directory", "oid": "0" * 40, "path": folder})
            if len(parts) > 1 and not recursive:
                continue
            entry = {"type": "file", "oid": f.git_sha1, "size": f.size, "path": name}
            if f.is_lfs:
                entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": 134}
            entries.append(entry)
        self._json(entries)

    # ---------------------------------------------------------------- files
    def _resolve(self, repo_id: str, rev: str, name: str) -> None:
        repo = self.state.repos.get(repo_id)
        if repo is None:
            return self._error(404, "RepoNotFound", "Repository not found")
        if denied := self._may_read(repo):
            status, code = denied
            return self._error(status, code, f"Access to model {repo_id} is restricted.")
        if rev not in ("main", repo.sha):
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        f = repo.files.get(name)
        if f is None:
            return self._error(404, "EntryNotFound", f"{name} does not exist", {"X-Repo-Commit": repo.sha})
        headers = {"X-Repo-Commit": repo.sha, "Accept-Ranges": "bytes", "ETag": f'"{f.git_sha1}"'}
        if f.is_lfs:  # the Hub redirects large files to its CDN, content-addressed by sha256
            headers.update({"X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(f.size),
                            "Location": f"/cdn/{f.sha256}?name={quote(name)}&repo={quote(repo_id)}"})
            return self._send(302, b"", headers)
        self._body(f, name, headers)

    def _cdn(self, rest: str) -> None:
        sha = rest
        q = parse_qs(urlsplit(self.path).query)
        repo = self.state.repos.get(q.get("repo", [""])[0])
        name = q.get("name", [""])[0]
        f = repo.files.get(name) if repo else None
        if f is None or f.sha256 != sha:
            return self._error(404, "EntryNotFound", "blob not found")
        self._body(f, name, {"ETag": f'"{sha}"'})

    def _body(self, f: HubFile, name: str, headers: dict) -> None:
        faults = self.state.faults
        if faults.rate_limited.get(name, 0) > 0 and self.command == "GET":
            faults.rate_limited[name] -= 1
            return self._error(429, "RateLimited", "Too many requests",
                               {"Retry-After": str(faults.retry_after)})
        size, start, status = f.size + faults.extra_bytes.get(name, 0), 0, 200
        if (rng := self.headers.get("Range")) and (m := re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())):
            start = int(m[1])
            if start >= size:
                return self._send(416, b"", {"Content-Range": f"bytes */{size}"})
            status = 206
            headers["Content-Range"] = f"bytes {start}-{size - 1}/{size}"
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(size - start))
        self.end_headers()
        if self.command == "HEAD":
            return
        drop_at = None
        if name in faults.drop_after and faults.drop_times.get(name, 1) > 0:
            faults.drop_times[name] = faults.drop_times.get(name, 1) - 1
            drop_at = faults.drop_after[name]
        if drop_at is None and name not in faults.corrupt and not faults.throttle_bytes_per_s \
                and name not in faults.extra_bytes and isinstance(f.content, Path):
            with open(f.content, "rb") as src:  # the fast path: the kernel copies file → socket
                self.wfile.flush()
                offset, left = start, size - start
                while left > 0:
                    sent = os.sendfile(self.connection.fileno(), src.fileno(), offset, left)
                    if sent == 0:
                        break
                    offset, left = offset + sent, left - sent
            return
        data = (f.read() + b"\0" * faults.extra_bytes.get(name, 0))[start:]
        if name in faults.corrupt:
            data = bytes(b ^ 0x5A for b in data[:64]) + data[64:]
        if drop_at is not None:
            data = data[:max(0, drop_at - start)]
        if (stall_at := faults.stall_after.get(name)) is not None:
            self._write_paced(data[:max(0, stall_at - start)], None)
            self.wfile.flush()
            self.state.stopping.wait()  # a stalled connection: open, and no more bytes
            self.close_connection = True
            return
        self._write_paced(data, faults.throttle_bytes_per_s)
        if drop_at is not None:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True

    def _write_paced(self, data: bytes, rate: Optional[int]) -> None:
        if not rate:
            self.wfile.write(data)
            return
        chunk = max(1, rate // 20)
        try:
            for i in range(0, len(data), chunk):
                self.wfile.write(data[i:i + chunk])
                self.wfile.flush()
                time.sleep(chunk / rate)
        except (BrokenPipeError, ConnectionResetError):
            # The client went away mid-file (a paused or cancelled download): what a real
            # server sees too. Stop quietly instead of printing a traceback in the test log.
            self.close_connection = True


class HubServer:
    """The fake Hub on 127.0.0.1 in a background thread; use as a context manager."""

    def __init__(self, state: Optional[HubState] = None, port: int = 0) -> None:
        self.state = state or HubState()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), HubHandler)
        self.httpd.daemon_threads = True
        self.httpd.state = self.state  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> "HubServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.state.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def main(argv: list[str]) -> None:
    """Serve the files named in ``argv`` as repo ``bench/files`` until killed."""
    state = HubState()
    state.add_repo(HubRepo("bench/files", {Path(p).name: HubFile(Path(p)) for p in argv}))
    with HubServer(state) as server:
        print(server.url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1:])
