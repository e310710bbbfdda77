"""A Hugging Face Hub stand-in for loader tests: the endpoints huggingface_hub 2.x calls to
resolve a revision, list a commit's files and download them, answered as the Hub answers, over
HTTPS with a private CA (the loader is told to trust it, as an on-premises hub's CA would be).

Written from huggingface_hub's source (`hf_api.py`, `_snapshot_download.py`, `file_download.py`,
`utils/_http.py`); what it covers:

- `GET /api/{models,datasets}/{org}/{name}/revision/{revision}` (`repo_info`): `id`, `sha` (the
  commit the revision resolves to), `private`, `gated`, `siblings`.
- `GET /api/{models,datasets}/{org}/{name}/tree/{revision}[/{path}]?recursive=...`
  (`list_repo_tree`): files (`type`, `oid`, `size`, `path`, `lfs` for large ones) and folders,
  paginated with a `Link: <...>; rel="next"` header as the Hub's cursor pages are.
- `HEAD` and `GET /[datasets/]{org}/{name}/resolve/{revision}/{path}` (`hf_hub_download`):
  `X-Repo-Commit`, `ETag` (the git blob id, or the sha256 for an LFS file), `Content-Length`,
  byte ranges (a resumed download).
- Errors as `hf_raise_for_status` reads them: `X-Error-Code` RepoNotFound (401 without a token,
  as the Hub hides private repositories; 404 with one), GatedRepo (401/403), RevisionNotFound and
  EntryNotFound (404), `X-Error-Message: Invalid credentials in Authorization header` (401) for an
  unknown token; and planned faults (429/5xx) for throttling and outages.

Known gaps: no Xet storage (no `X-Xet-*` headers, so huggingface_hub downloads over plain HTTP as
it does from any hub without Xet), no CDN redirects for LFS files, no commit history or refs
listing, no uploads, no rate-limit headers, tokens are opaque strings (no fine-grained scopes).
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import tempfile
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.world.stand_ins.tls_server import start_https

LFS_THRESHOLD = 10 * 1024 * 1024  # larger files are LFS files, as the Hub stores them
INVALID_TOKEN = "Invalid credentials in Authorization header"


@dataclass
class Repo:
    repo_type: str  # "model" or "dataset"
    repo_id: str
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # commit -> files
    refs: dict[str, str] = field(default_factory=dict)  # branch or tag -> commit
    private: bool = False
    gated: bool = False
    readers: set[str] = field(default_factory=set)  # tokens that may read it (private/gated)

    def commit(self, files: Mapping[str, bytes], branch: str = "main") -> str:
        """A new commit on `branch` with exactly these files; its id."""
        digest = hashlib.sha1(f"{self.repo_id}{len(self.commits)}".encode())
        for path in sorted(files):
            digest.update(path.encode() + b"\0" + files[path])
        sha = digest.hexdigest()
        self.commits[sha] = dict(files)
        self.refs[branch] = sha
        return sha

    def resolve(self, revision: str) -> str | None:
        if revision in self.commits:
            return revision
        return self.refs.get(revision)


@functools.lru_cache(maxsize=4096)
def _digests(data: bytes) -> tuple[str, str]:
    """(git blob id, sha256) of a file's bytes, computed once per distinct content: the Hub
    answers listings and HEADs from stored metadata, not by hashing the files each time."""
    git = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    return git, hashlib.sha256(data).hexdigest()


def blob_id(data: bytes) -> str:
    """Git's blob id, what the Hub gives as a regular file's oid and ETag."""
    return _digests(data)[0]


def lfs_oid(data: bytes) -> str:
    """An LFS file's oid and ETag: its sha256."""
    return _digests(data)[1]


@dataclass
class Fault:
    status: int
    times: int  # -1: every matching request


class HubStandIn:
    def __init__(self, page_size: int = 1000, host: str = "127.0.0.1") -> None:
        self.repos: dict[tuple[str, str], Repo] = {}
        self.tokens: set[str] = set()  # every token the stand-in knows
        self.faults: dict[str, Fault] = {}  # path prefix -> fault
        self.requests: list[tuple[str, str]] = []  # (method, path and query)
        self.page_size = page_size
        self._lock = threading.Lock()
        self._dir = tempfile.TemporaryDirectory(prefix="hub-")
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                hub._serve(self, body=True)

            def do_HEAD(self) -> None:
                hub._serve(self, body=False)

            def log_message(self, *_args: Any) -> None:
                pass

        self._server, ca_pem = start_https("hub", Handler, host)
        self.ca_path = Path(self._dir.name) / "hub-ca.crt"
        self.ca_path.write_bytes(ca_pem)
        self.endpoint = f"https://{host}:{self._server.server_address[1]}"

    # -- set-up ---------------------------------------------------------------------------------

    def repo(self, repo_id: str, repo_type: str = "model", **options: Any) -> Repo:
        repo = Repo(repo_type, repo_id, **options)
        self.repos[(repo_type, repo_id)] = repo
        return repo

    def token(self, name: str) -> str:
        """A token the stand-in accepts, shaped as the Hub's are."""
        token = "hf_" + hashlib.sha256(name.encode()).hexdigest()[:34]
        self.tokens.add(token)
        return token

    def fail(self, path: str, status: int, times: int = -1) -> None:
        self.faults[path] = Fault(status, times)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._dir.cleanup()

    # -- serving --------------------------------------------------------------------------------

    def _serve(self, handler: http.server.BaseHTTPRequestHandler, body: bool) -> None:
        url = urllib.parse.urlsplit(handler.path)
        with self._lock:
            self.requests.append((handler.command, handler.path))
            fault = next((f for p, f in self.faults.items() if url.path.startswith(p)), None)
            if fault is not None and fault.times != 0:
                fault.times -= 1 if fault.times > 0 else 0
                return self._answer(handler, fault.status, b"", {}, body)
        auth = handler.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else None
        if token is not None and token not in self.tokens:
            return self._error(handler, 401, "", body, message=INVALID_TOKEN)
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
        query = urllib.parse.parse_qs(url.query)
        if parts[:1] == ["api"] and len(parts) >= 6 and parts[1] in ("models", "datasets"):
            repo_type = parts[1][:-1]
            repo = self._readable(handler, repo_type, f"{parts[2]}/{parts[3]}", token, body)
            if repo is None:
                return None
            if parts[4] == "revision":
                return self._revision(handler, repo, "/".join(parts[5:]), body)
            if parts[4] == "tree":
                return self._tree(handler, repo, parts[5], "/".join(parts[6:]), query, body)
        resolve = parts.index("resolve") if "resolve" in parts else -1
        if resolve in (2, 3):
            repo_type = "dataset" if resolve == 3 and parts[0] == "datasets" else "model"
            start = 1 if repo_type == "dataset" else 0
            repo_id = "/".join(parts[start:resolve])
            repo = self._readable(handler, repo_type, repo_id, token, body)
            if repo is None:
                return None
            return self._file(
                handler, repo, parts[resolve + 1], "/".join(parts[resolve + 2 :]), body
            )
        return self._error(handler, 404, "", body, message="not a Hub endpoint")

    def _readable(
        self,
        handler: http.server.BaseHTTPRequestHandler,
        repo_type: str,
        repo_id: str,
        token: str | None,
        body: bool,
    ) -> Repo | None:
        repo = self.repos.get((repo_type, repo_id))
        if repo is None or (repo.private and token not in repo.readers):
            # The Hub does not say whether a private repository exists.
            self._error(handler, 401 if token is None else 404, "RepoNotFound", body)
            return None
        if repo.gated and token not in repo.readers:
            self._error(handler, 401 if token is None else 403, "GatedRepo", body)
            return None
        return repo

    def _revision(
        self, handler: http.server.BaseHTTPRequestHandler, repo: Repo, revision: str, body: bool
    ) -> None:
        commit = repo.resolve(revision)
        if commit is None:
            return self._error(handler, 404, "RevisionNotFound", body)
        info = {
            "_id": hashlib.md5(repo.repo_id.encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "sha": commit,
            "private": repo.private,
            "gated": "auto" if repo.gated else False,
            "disabled": False,
            "siblings": [{"rfilename": p} for p in sorted(repo.commits[commit])],
        }
        return self._json(handler, info, body)

    def _tree(
        self,
        handler: http.server.BaseHTTPRequestHandler,
        repo: Repo,
        revision: str,
        path: str,
        query: Mapping[str, list[str]],
        body: bool,
    ) -> None:
        commit = repo.resolve(revision)
        if commit is None:
            return self._error(handler, 404, "RevisionNotFound", body)
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        entries = tree_entries(repo.commits[commit], path, recursive)
        cursor = int(query.get("cursor", ["0"])[0])
        page = entries[cursor : cursor + self.page_size]
        headers = {}
        if cursor + self.page_size < len(entries):
            params = {k: v[0] for k, v in query.items()} | {"cursor": cursor + self.page_size}
            link = f"{self.endpoint}{urllib.parse.urlsplit(handler.path).path}?"
            headers["Link"] = f'<{link}{urllib.parse.urlencode(params)}>; rel="next"'
        return self._json(handler, page, body, headers)

    def _file(
        self,
        handler: http.server.BaseHTTPRequestHandler,
        repo: Repo,
        revision: str,
        path: str,
        body: bool,
    ) -> None:
        commit = repo.resolve(revision)
        if commit is None:
            return self._error(handler, 404, "RevisionNotFound", body)
        data = repo.commits[commit].get(path)
        if data is None:
            return self._error(handler, 404, "EntryNotFound", body, {"X-Repo-Commit": commit})
        etag = lfs_oid(data) if len(data) > LFS_THRESHOLD else blob_id(data)
        headers = {"X-Repo-Commit": commit, "ETag": f'"{etag}"', "Accept-Ranges": "bytes"}
        wanted = handler.headers.get("Range", "")
        if wanted.startswith("bytes=") and body:
            first, _, last = wanted[len("bytes=") :].partition("-")
            start, end = int(first or 0), int(last) if last else len(data) - 1
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            return self._answer(handler, 206, data[start : end + 1], headers, body)
        return self._answer(handler, 200, data, headers, body)

    # -- answers --------------------------------------------------------------------------------

    def _json(
        self,
        handler: http.server.BaseHTTPRequestHandler,
        value: Any,
        body: bool,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        data = json.dumps(value).encode()
        self._answer(
            handler, 200, data, {"Content-Type": "application/json", **(headers or {})}, body
        )

    def _error(
        self,
        handler: http.server.BaseHTTPRequestHandler,
        status: int,
        code: str,
        body: bool,
        headers: Mapping[str, str] | None = None,
        message: str = "",
    ) -> None:
        extra = dict(headers or {})
        if code:
            extra["X-Error-Code"] = code
        if message:
            extra["X-Error-Message"] = message
        data = json.dumps({"error": message or code}).encode()
        self._answer(handler, status, data, {"Content-Type": "application/json", **extra}, body)

    @staticmethod
    def _answer(
        handler: http.server.BaseHTTPRequestHandler,
        status: int,
        data: bytes,
        headers: Mapping[str, str],
        body: bool,
    ) -> None:
        handler.send_response(status)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if body and data:
            handler.wfile.write(data)


def tree_entries(files: Mapping[str, bytes], path: str, recursive: bool) -> list[dict[str, Any]]:
    """The tree endpoint's entries under `path`: its files and folders (all levels when
    recursive), folders first at each level, as the Hub sorts them."""
    prefix = f"{path.strip('/')}/" if path.strip("/") else ""
    folders: set[str] = set()
    entries: list[dict[str, Any]] = []
    for name in sorted(files):
        if not name.startswith(prefix):
            continue
        rest = name[len(prefix) :].split("/")
        for depth in range(1, len(rest)):
            folder = prefix + "/".join(rest[:depth])
            if recursive or depth == 1:
                folders.add(folder)
        if len(rest) > 1 and not recursive:
            continue
        data = files[name]
        entry: dict[str, Any] = {"type": "file", "oid": blob_id(data), "size": len(data)}
        entry["path"] = name
        if len(data) > LFS_THRESHOLD:
            entry["lfs"] = {"oid": lfs_oid(data), "size": len(data), "pointerSize": 134}
        entries.append(entry)
    dirs = [
        {"type": "directory", "oid": hashlib.sha1(f.encode()).hexdigest(), "size": 0, "path": f}
        for f in sorted(folders)
    ]
    return dirs + entries


@contextmanager
def hub_stand_in(page_size: int = 1000, host: str = "127.0.0.1") -> Iterator[HubStandIn]:
    """`host`: 127.0.0.1, or the pod network's address for loaders on the real node."""
    hub = HubStandIn(page_size, host)
    try:
        yield hub
    finally:
        hub.stop()
