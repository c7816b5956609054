"""Downloads: what to fetch for ``REPO[:QUANT]``, the job that fetches it, and a queue.

- :func:`plan_pull` turns ``REPO[:QUANT]`` into a :class:`DownloadPlan` — the shards of a
  GGUF variant, or a safetensors checkpoint's weights and side files — pinned to a commit.
- :func:`download_plan` is the long job (``report``/``cancel`` as in :mod:`models.foundation.jobs`):
  free-disk check first, then each file through :func:`models.hub.transfer.fetch_file`,
  progress with bytes, speed and ETA.
- :class:`DownloadManager` runs plans one after another in a worker thread with pause,
  resume and cancel; :func:`incomplete_downloads` finds the partial files a previous run
  (or a killed process) left, so they can be resumed after a restart.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from models.foundation.errors import Cancelled, QuantDeskError
from models.foundation.jobs import CancelToken, Progress, ProgressCallback, check
from models.foundation.paths import app_paths
from models.hardware import free_disk_bytes
from models.hub.auth import resolve_token
from models.hub.details import HubFileInfo, ModelDetails, model_details, projector_for, projectors_of
from models.hub.transfer import (
    RemoteFile, RetryPolicy, discard_partial, fetch_file, local_target, part_path, read_sidecar,
)

DISK_MARGIN = 64 << 20  # keep this much free beyond the download itself


@dataclass
class DownloadPlan:
    """The files of one pull, all from the same commit."""

    repo_id: str
    commit: str
    label: str  # "Q4_K_M", or "safetensors" for a checkpoint
    files: list[RemoteFile]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def targets(self, models_dir: Path) -> list[Path]:
        """Final local paths, in file order (checked: none can leave ``models_dir``)."""
        return [local_target(models_dir, f.repo_id, f.path) for f in self.files]


def parse_pull_spec(spec: str) -> tuple[str, Optional[str]]:
    """``"owner/name:Q4_K_M"`` → ``("owner/name", "Q4_K_M")``; the quant is optional."""
    repo_id, _, quant = spec.strip().partition(":")
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise QuantDeskError(f"'{spec}' is not a model name.",
                             "Write it as OWNER/NAME or OWNER/NAME:QUANT, e.g. "
                             "bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M.")
    return repo_id, quant or None


def _remote(repo_id: str, commit: str, f: HubFileInfo) -> RemoteFile:
    return RemoteFile(repo_id, commit, f.path, f.size, f.sha256, f.blob_id)


def plan_pull(spec: str, revision: Optional[str] = None) -> DownloadPlan:
    """What ``quantdesk pull SPEC`` downloads.

    With a quant, that GGUF variant (all its shards). Without one, the default variant
    (Q4_K_M when there is one) of a GGUF repo, else the repo's safetensors checkpoint.
    """
    repo_id, quant = parse_pull_spec(spec)
    details = model_details(repo_id, revision)
    if quant:
        return plan_details(details, quant)
    variant = details.default_variant()
    return plan_details(details, variant.quant if variant is not None else None)


#: ``plan_details(..., projector=NO_PROJECTOR)``: the variant alone, without a vision encoder.
NO_PROJECTOR = ""


def plan_details(details: ModelDetails, quant: Optional[str], projector: Optional[str] = None) -> DownloadPlan:
    """The download of one variant of ``details`` (all shards, and the vision encoder that
    goes with it), or of its checkpoint when ``quant`` is ``None`` or ``"safetensors"``; the
    Models page calls this with what it shows.

    ``projector``: the vision encoder, by its path in the repository (the person's choice),
    :data:`NO_PROJECTOR` for none, or ``None`` for the one llama.cpp's rule pairs
    (:func:`~models.hub.details.projector_for`).
    """
    repo_id = details.repo_id
    variant = details.variant(quant) if quant and quant != "safetensors" else None
    if variant is not None:
        if not variant.complete:
            raise QuantDeskError(
                f"{repo_id} lists {len(variant.files)} of the {variant.expected_shards} parts of {variant.quant}.",
                "Pick another quantization; this one cannot be loaded incomplete.")
        files, label = list(variant.files), variant.quant
        encoder = _chosen_projector(details, variant, projector)  # an image-text model reads images with it
        if encoder is not None:
            files.append(encoder)
    elif details.checkpoint is not None:
        files, label = details.checkpoint.files, "safetensors"
    else:
        raise QuantDeskError(f"{repo_id} has neither GGUF files nor a safetensors checkpoint.",
                             "Search for a GGUF or safetensors version of this model.")
    return DownloadPlan(repo_id, details.commit, label, [_remote(repo_id, details.commit, f) for f in files])


def _chosen_projector(details: ModelDetails, variant, projector: Optional[str]) -> Optional[HubFileInfo]:
    if projector is None:
        return projector_for(details, variant)
    if projector == NO_PROJECTOR:
        return None
    found = next((f for f in projectors_of(details) if f.path == projector), None)
    if found is None:
        raise QuantDeskError(f"{details.repo_id} has no vision encoder {projector}.",
                             "Choose one of the mmproj files the repository lists.")
    return found


def _remaining_bytes(plan: DownloadPlan, models_dir: Path) -> int:
    left = 0
    for remote, target in zip(plan.files, plan.targets(models_dir)):
        if _already_there(remote, target):
            continue
        part = part_path(target)
        have = part.stat().st_size if part.exists() and read_sidecar(target) == remote else 0
        left += max(0, remote.size - have)
    return left


def _already_there(remote: RemoteFile, target: Path) -> bool:
    # Only verified files are ever renamed to their real name, so size is enough here.
    return target.exists() and target.stat().st_size == remote.size


def check_free_disk(plan: DownloadPlan, models_dir: Path) -> None:
    """Refuse to start when the models folder's disk cannot hold what is left to fetch."""
    needed = _remaining_bytes(plan, models_dir)
    free = free_disk_bytes(models_dir)
    if needed + DISK_MARGIN > free:
        raise QuantDeskError(
            f"{plan.repo_id} {plan.label} needs {needed / 2**30:.2f} GiB but the disk holding "
            f"{models_dir} has {free / 2**30:.2f} GiB free.",
            "Free some space or move the models folder (QUANTDESK_HOME), then try again.")


class TransferMeter:
    """Bytes done, speed over the last few seconds, and ETA for a progress line."""

    def __init__(self, total: int, window: float = 3.0) -> None:
        self.total, self.done, self.window = total, 0, window
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    def add(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        self._samples.append((now, self.done))
        while len(self._samples) > 2 and now - self._samples[0][0] > self.window:
            self._samples.popleft()

    @property
    def speed(self) -> Optional[float]:
        """Bytes per second recently, or ``None`` before two samples."""
        if len(self._samples) < 2:
            return None
        (t0, d0), (t1, d1) = self._samples[0], self._samples[-1]
        return (d1 - d0) / (t1 - t0) if t1 > t0 else None

    @property
    def eta(self) -> Optional[float]:
        speed = self.speed
        return (self.total - self.done) / speed if speed else None

    def describe(self, name: str) -> str:
        speed, eta = self.speed, self.eta
        rate = f"{speed / 2**20:.1f} MiB/s" if speed else "-- MiB/s"
        left = f"ETA {int(eta) // 60}:{int(eta) % 60:02d}" if eta is not None else "ETA --:--"
        return f"{name} {self.done / 2**20:.1f}/{self.total / 2**20:.1f} MiB {rate} {left}"


def download_plan(plan: DownloadPlan, report: Optional[ProgressCallback] = None,
                  cancel: Optional[CancelToken] = None, models_dir: Optional[Path] = None,
                  policy: RetryPolicy = RetryPolicy(), min_interval: float = 0.1) -> list[Path]:
    """Fetch every file of ``plan`` into the models folder; resumes what is on disk.

    Cancellation keeps partial data (that is a pause); :func:`cancel_plan` removes it.
    An automatic retry after a network fault is reported with stage ``"Retrying"``.
    Returns the local paths, all verified.
    """
    models_dir = Path(models_dir or app_paths().ensure().models)
    check_free_disk(plan, models_dir)
    token, _ = resolve_token()
    meter = TransferMeter(plan.size)
    last = [float("-inf")]
    paths = []
    for remote, target in zip(plan.files, plan.targets(models_dir)):
        check(cancel)
        name = remote.path.rsplit("/", 1)[-1]

        def on_bytes(n: int, name: str = name) -> None:
            meter.add(n)
            now = time.monotonic()
            if report and (now - last[0] >= min_interval or meter.done >= meter.total):
                last[0] = now
                report(Progress(meter.done, meter.total, "Downloading", meter.describe(name)))

        def on_retry(reason: str, wait: float, name: str = name) -> None:
            if report:
                report(Progress(meter.done, meter.total, "Retrying",
                                f"{name}: {reason}; retrying in {wait:.0f} s"))

        if _already_there(remote, target):
            on_bytes(remote.size)
        else:
            fetch_file(remote, target, token, on_bytes, cancel, policy, on_retry)
        paths.append(target)
    return paths


def cancel_plan(plan: DownloadPlan, models_dir: Optional[Path] = None) -> None:
    """Delete the partial data of every unfinished file of ``plan``."""
    models_dir = Path(models_dir or app_paths().models)
    for target in plan.targets(models_dir):
        discard_partial(target)


def incomplete_downloads(models_dir: Optional[Path] = None) -> list[DownloadPlan]:
    """Partial downloads left on disk (paused, failed, or the app was killed), by repo."""
    models_dir = Path(models_dir or app_paths().models)
    plans: dict[tuple[str, str], DownloadPlan] = {}
    for sidecar in sorted((models_dir / "hub").rglob(".*.download.json")):
        target = sidecar.with_name(sidecar.name[1:-len(".download.json")])
        remote = read_sidecar(target)
        if remote is None:
            continue
        key = (remote.repo_id, remote.commit)
        plans.setdefault(key, DownloadPlan(remote.repo_id, remote.commit, "resume", [])).files.append(remote)
    return list(plans.values())


@dataclass
class DownloadTask:
    """A plan in the manager's queue, and where it stands."""

    plan: DownloadPlan
    state: str = "queued"  # queued, downloading, retrying, paused, cancelled, done, failed
    progress: Optional[Progress] = None
    error: Optional[str] = None
    paths: list[Path] = field(default_factory=list)
    _token: CancelToken = field(default_factory=CancelToken)
    _intent: str = ""
    _finished: threading.Event = field(default_factory=threading.Event)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until the task stops (done, failed, paused or cancelled)."""
        return self._finished.wait(timeout)


class DownloadManager:
    """A queue of downloads run one at a time in a background thread."""

    def __init__(self, models_dir: Optional[Path] = None, policy: RetryPolicy = RetryPolicy(),
                 on_update: Optional[Callable[[DownloadTask], None]] = None) -> None:
        self.models_dir = Path(models_dir or app_paths().ensure().models)
        self.policy = policy
        self.on_update = on_update
        self.tasks: list[DownloadTask] = []
        self._queue: collections.deque[DownloadTask] = collections.deque()
        self._wake = threading.Condition()
        self._worker = threading.Thread(target=self._run, name="quantdesk-downloads", daemon=True)
        self._worker.start()

    def enqueue(self, plan: DownloadPlan) -> DownloadTask:
        """Add ``plan`` at the end of the queue."""
        task = DownloadTask(plan)
        self.tasks.append(task)
        self._push(task)
        return task

    def restore(self) -> list[DownloadTask]:
        """Queue, paused, the partial downloads found on disk (after a restart)."""
        restored = []
        for plan in incomplete_downloads(self.models_dir):
            task = DownloadTask(plan, state="paused")
            task._finished.set()
            self.tasks.append(task)
            restored.append(task)
        return restored

    def pause(self, task: DownloadTask) -> None:
        """Stop ``task`` and keep its partial data for :meth:`resume`."""
        self._stop(task, "pause")

    def cancel(self, task: DownloadTask) -> None:
        """Stop ``task`` and delete its partial data."""
        self._stop(task, "cancel")
        if task.state in ("queued", "paused"):
            self._finish(task, "cancelled")

    def resume(self, task: DownloadTask) -> None:
        """Queue a paused or failed task again; it continues from the bytes on disk."""
        if task.state in ("paused", "failed"):
            task._token, task._intent, task.error = CancelToken(), "", None
            task._finished.clear()
            task.state = "queued"
            self._push(task)

    def _push(self, task: DownloadTask) -> None:
        with self._wake:
            self._queue.append(task)
            self._wake.notify()

    def _stop(self, task: DownloadTask, intent: str) -> None:
        task._intent = intent
        task._token.cancel()
        with self._wake:
            if task in self._queue and intent == "pause":
                self._queue.remove(task)
                self._finish(task, "paused")

    def _finish(self, task: DownloadTask, state: str, error: Optional[str] = None) -> None:
        if state == "cancelled":
            cancel_plan(task.plan, self.models_dir)
        task.state, task.error = state, error
        task._finished.set()
        self._notify(task)

    def _notify(self, task: DownloadTask) -> None:
        if self.on_update:
            self.on_update(task)

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._queue:
                    self._wake.wait()
                task = self._queue.popleft()
            if task._token.cancelled:
                self._finish(task, "cancelled" if task._intent == "cancel" else "paused")
                continue
            task.state = "downloading"
            self._notify(task)

            def report(p: Progress, task: DownloadTask = task) -> None:
                task.progress = p
                task.state = "retrying" if p.stage == "Retrying" else "downloading"
                self._notify(task)

            try:
                task.paths = download_plan(task.plan, report, task._token, self.models_dir, self.policy)
                self._finish(task, "done")
            except Cancelled:
                self._finish(task, "cancelled" if task._intent == "cancel" else "paused")
            except QuantDeskError as exc:
                self._finish(task, "failed", exc.user_message)
