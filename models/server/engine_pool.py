"""One engine per model, shared by the API server and the window's Chat page.

:class:`EnginePool` loads a model on the first request that names it — with the load
settings its owner gives for that file (the app passes what the Chat page remembers)
and the server's number of slots — after checking that it fits in memory
(:mod:`models.memory_fit`; a load that does not fit is refused with its sentence, never
attempted). A model the server loaded is unloaded after an idle time. The window hands
its own chat engine over with :meth:`EnginePool.adopt`, so a model open in the Chat
page is served by that same engine rather than loaded a second time; the pool never
unloads an adopted engine. The other way round, :meth:`EnginePool.hand_over` gives the
Chat page the engine the server already loaded for the model it opens, so that model is
not loaded a second time either. An embedding model (the Library's mark: an encoder
architecture or a pooling type in its header) is loaded in embedding mode, with one slot.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional

from models.foundation.errors import QuantDeskError

log = logging.getLogger(__name__)

DEFAULT_SLOTS = (4, 2, 1)  # tried in order when the number of slots is sized to memory


@dataclass(frozen=True)
class ModelStatus:
    """A model as the Server page shows it."""

    id: str
    path: Path
    loaded: bool
    slots: int
    context_per_slot: int
    active_requests: int
    queued: int


class PooledEngine:
    """A loaded model: its engine, its slots and how busy it is.

    ``active`` and ``queued`` are kept by the server (the requests decoding and waiting
    for a slot); the pool unloads an idle engine only when both are 0.
    """

    def __init__(self, path: Path, client: Any, owned: bool,
                 settings: Optional[Any] = None) -> None:
        self.path = path
        self.client = client
        self.owned = owned
        self.settings = settings  # the load settings the pool asked for (owned engines)
        self.active = 0
        self.queued = 0
        self.last_used = time.monotonic()

    @property
    def slots(self) -> int:
        """Requests the engine decodes together."""
        report = self.client.last_load
        return report.parallel if report is not None else 1

    @property
    def embedding(self) -> bool:
        """Whether the model is loaded for embeddings (it makes vectors, not replies)."""
        report = self.client.last_load
        return bool(report is not None and getattr(report.settings, "embedding", False))

    @property
    def projector(self) -> Optional[str]:
        """The vision encoder (mmproj file) the model was loaded with, if any."""
        report = self.client.last_load
        return getattr(report.settings, "mmproj", None) if report is not None else None

    @property
    def reads_images(self) -> bool:
        """Whether the model was loaded with a vision encoder (an mmproj)."""
        return bool(self.projector)

    @property
    def context_per_slot(self) -> int:
        """Tokens one request's prompt and reply may hold together."""
        report = self.client.last_load
        return int(report.context_length) if report is not None else 0

    def holds_model(self) -> bool:
        """Whether the engine still has this model (the window may have loaded another)."""
        report = self.client.last_load
        return report is not None and Path(report.path).resolve() == self.path

    def touch(self) -> None:
        self.last_used = time.monotonic()


def _fit(path: Path, settings: Any, slots: int):
    """memory_fit's verdict for ``settings`` with ``slots`` contexts of its length."""
    from models.engine.fallback import extra_bufts_for
    from models.memory_fit import FitSettings, fit_on_this_machine, free_memory

    ram, vram = free_memory()
    if settings.remote_devices:
        # The offloaded layers live on other computers' workers (llama.cpp checks their
        # memory): this computer's RAM holds the rest.
        from dataclasses import replace

        from models.memory_fit import judge_fit, predict_memory

        prediction = predict_memory(path, FitSettings(
            n_ctx=max(settings.context_length, 1) * slots, kv_type=settings.kv_cache_type_k,
            n_gpu_layers=settings.gpu_layers, n_batch=settings.batch_size,
            n_ubatch=settings.micro_batch_size, flash_attn=settings.flash_attention))
        return judge_fit(replace(prediction, weights_gpu=0, kv_gpu=0, compute_gpu=0), ram, None)
    return fit_on_this_machine(path, FitSettings(
        n_ctx=max(settings.context_length, 1) * slots, kv_type=settings.kv_cache_type_k,
        n_gpu_layers=settings.gpu_layers if vram else 0, n_batch=settings.batch_size,
        n_ubatch=settings.micro_batch_size, flash_attn=settings.flash_attention,
        cpu_moe_layers=settings.cpu_moe_layers, use_mmap=settings.use_mmap,
        use_extra_bufts=extra_bufts_for(settings.use_extra_bufts),
        projector_bytes=Path(settings.mmproj).stat().st_size if getattr(settings, "mmproj", None) else 0))


def _is_embedding_model(path: Path) -> bool:
    """Whether the GGUF at ``path`` is an embedding model (unreadable: no; the load then
    says why)."""
    from models.engine.gguf_info import read_model_info

    try:
        return read_model_info(path).embedding
    except QuantDeskError:
        return False


class EnginePool:
    """The engines the server uses, one per model path.

    Args:
        settings_for: The load settings of a model file (the app passes what the Chat
            page remembers for it).
        parallel: Slots per model; ``None`` picks the most of 4, 2, 1 that fits comfortably.
        idle_unload_seconds: Unload a model the pool loaded after this long unused; 0 never.
        client_factory: Makes an engine client (``EngineClient``).
        check_memory: Refuse loads that ``memory_fit`` says will not fit.
        prompt_cache_bytes: RAM for each engine's prompt cache (``None``: the engine's
            default).
    """

    def __init__(self, settings_for: Callable[[Path], Any],
                 parallel: Optional[int] = None, idle_unload_seconds: float = 600.0,
                 client_factory: Optional[Callable[[], Any]] = None,
                 check_memory: bool = True, prompt_cache_bytes: Optional[int] = None) -> None:
        if client_factory is None:
            from models.engine.client import EngineClient as client_factory

            if prompt_cache_bytes is not None:
                client_factory = functools.partial(client_factory,
                                                   prompt_cache_bytes=prompt_cache_bytes)
        self.settings_for = settings_for
        self.parallel = parallel
        self.idle_unload_seconds = idle_unload_seconds
        self.client_factory = client_factory
        self.check_memory = check_memory
        self._engines: dict[Path, PooledEngine] = {}
        self._lock = threading.Lock()
        self._loading: dict[Path, threading.Lock] = {}
        self._retired: list[PooledEngine] = []  # replaced while busy: shut down when idle

    # -- sharing with the window ------------------------------------------------------

    def adopt(self, path: Path | str, client: Any) -> None:
        """Serve ``path`` with ``client`` (the window's chat engine, which has it loaded)."""
        key = Path(path).resolve()
        with self._lock:
            previous = self._engines.get(key)
            self._engines[key] = PooledEngine(key, client, owned=False)
        if previous is not None and previous.client is not client:
            self._retire(previous)

    def hand_over(self, path: Path | str, settings: Any) -> Optional[Any]:
        """The engine the pool loaded for ``path``, given to the window's chat that opens
        the same model with the same load settings (slots aside), so the model is not
        loaded twice; ``None`` when there is none. The pool goes on serving with it, as
        an adopted engine: the chat owns it from now on."""
        key = Path(path).resolve()
        with self._lock:
            entry = self._engines.get(key)
            if entry is None or not entry.owned or entry.settings is None \
                    or not entry.holds_model():
                return None
            if replace(entry.settings, parallel=settings.parallel) != settings:
                return None
            entry.owned = False
            return entry.client

    def release(self, path: Path | str) -> None:
        """Stop serving ``path`` from its engine: forget an adopted one, unload an owned one
        (once the requests it is answering have ended)."""
        with self._lock:
            entry = self._engines.pop(Path(path).resolve(), None)
        if entry is not None:
            self._retire(entry)

    def _retire(self, entry: PooledEngine) -> None:
        """Shut an owned engine down now, or when its last request ends (``unload_idle``)."""
        if not entry.owned:
            return
        if entry.active or entry.queued:
            with self._lock:
                self._retired.append(entry)
            return
        entry.client.shutdown()

    # -- serving ----------------------------------------------------------------------

    def peek(self, path: Path) -> Optional[PooledEngine]:
        """The engine serving ``path`` now, without loading it."""
        with self._lock:
            entry = self._engines.get(Path(path).resolve())
        return entry if entry is not None and entry.holds_model() else None

    def get(self, path: Path) -> PooledEngine:
        """The engine serving ``path``, loading the model first when needed (blocks).

        Raises:
            QuantDeskError: The model does not fit in memory, or the load failed.
        """
        key = Path(path).resolve()
        with self._lock:
            load_lock = self._loading.setdefault(key, threading.Lock())
        with load_lock:  # a second request for a model being loaded waits for that load
            entry = self.peek(key)
            if entry is not None:
                entry.touch()  # so the idle unloader leaves it alone while the request starts
                return entry
            with self._lock:
                stale = self._engines.pop(key, None)
            if stale is not None:
                self._retire(stale)
            client, settings = self._load(key)
            entry = PooledEngine(key, client, owned=True, settings=settings)
            with self._lock:
                self._engines[key] = entry
            return entry

    def _load(self, path: Path) -> tuple[Any, Any]:
        """A new engine with ``path`` loaded, and the settings it was loaded with."""
        settings = self.settings_for(path)
        if _is_embedding_model(path):
            settings = replace(settings, embedding=True, parallel=1)
        else:
            from models.projector import with_projector  # the chosen encoder, else the one beside

            settings = with_projector(path, settings)  # (a remembered one may have moved)
        slots = self._slots(path, settings, (1,) if settings.embedding else None)
        settings = replace(settings, parallel=slots)
        client = self.client_factory()
        started = time.perf_counter()
        try:
            client.load(path, settings)
        except BaseException:
            client.shutdown()
            raise
        log.info("server: loaded %s with %d slot(s) of %d tokens in %.1f s", path.name, slots,
                 client.last_load.context_length, time.perf_counter() - started)
        return client, settings

    def _slots(self, path: Path, settings: Any, choices: Optional[tuple] = None) -> int:
        """The slots to load with (of ``choices``, by default the pool's); refuses (with
        memory_fit's sentence) what cannot fit."""
        choices = choices or ((self.parallel,) if self.parallel else DEFAULT_SLOTS)
        if not self.check_memory:
            return choices[0]
        for attempt in range(2):
            verdict = None
            for slots in choices:
                verdict = _fit(path, settings, slots)
                if verdict.verdict == "fits" or (slots == choices[-1]
                                                 and verdict.verdict != "won't fit"):
                    return slots
            if attempt == 0 and self._unload_one_idle():
                continue  # memory freed by an idle model: judge again
            assert verdict is not None
            raise QuantDeskError(
                f"{path.name} with {choices[-1]} slot(s) of {settings.context_length} tokens "
                f"would not fit in memory: it {verdict.reason}.",
                "Unload another model, or give it a smaller context (Chat page, load "
                "settings) or fewer slots (--parallel).")
        raise AssertionError("unreachable")

    # -- housekeeping -----------------------------------------------------------------

    def engines(self) -> list[PooledEngine]:
        """The engines that hold their model now."""
        with self._lock:
            entries = list(self._engines.values())
        return [e for e in entries if e.holds_model()]

    def _unload_one_idle(self) -> bool:
        idle = [e for e in self.engines() if e.owned and not e.active and not e.queued]
        if not idle:
            return False
        self.release(min(idle, key=lambda e: e.last_used).path)
        return True

    def unload_idle(self, now: Optional[float] = None) -> list[Path]:
        """Unload the models the pool loaded that have been idle past the idle time."""
        with self._lock:
            retired, self._retired = self._retired, []
        for entry in retired:
            self._retire(entry)
        if not self.idle_unload_seconds:
            return []
        now = time.monotonic() if now is None else now
        unloaded = []
        for entry in self.engines():
            if entry.owned and not entry.active and not entry.queued \
                    and now - entry.last_used >= self.idle_unload_seconds:
                log.info("server: unloading %s after %.0f s unused", entry.path.name,
                         now - entry.last_used)
                self.release(entry.path)
                unloaded.append(entry.path)
        return unloaded

    def close(self) -> None:
        """Unload every model the pool loaded (adopted engines are left to their owner)."""
        with self._lock:
            entries, self._engines = list(self._engines.values()) + self._retired, {}
            self._retired = []
        for entry in entries:
            if entry.owned:
                entry.client.shutdown()
