"""The models on disk: downloaded, converted, quantized or imported, with their metadata.

An index in SQLite (``models/.library.sqlite3``) holds one row per model: a GGUF file
(split models: the first shard, sizes summed) or a safetensors folder. Metadata comes
from the GGUF header (:mod:`models.gguf_header`, no weights read): architecture,
parameter count, quant type (``general.file_type``), context length, chat template.
A rescan re-reads only files whose size or mtime changed, so a folder of hundreds of
models lists at once.

Imported models stay where the user keeps them (a 30 GB file is not copied); the index
remembers their path. The converter and quantizer record what they write
(:meth:`Library.record_output`), wherever the user asked for it. Removing deletes files
only inside the models folder; a model elsewhere is only forgotten.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import sqlite3
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Iterator, Optional

from quantize.ggml_types import LlamaFileType

from models.foundation.errors import QuantDeskError
from models.foundation.paths import app_paths
from models.gguf_header import is_embedding_model, read_gguf_header

log = logging.getLogger(__name__)

DB_NAME = ".library.sqlite3"
SOURCES = ("downloaded", "converted", "quantized", "imported")
_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_FLOAT_FILE_TYPES = {0, 1, 32}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS models (
    path TEXT PRIMARY KEY, kind TEXT NOT NULL, source TEXT NOT NULL, name TEXT NOT NULL,
    size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, architecture TEXT, parameters INTEGER,
    file_type INTEGER, quant TEXT, context_length INTEGER, chat_template INTEGER,
    files TEXT NOT NULL, error TEXT, added REAL NOT NULL, active_parameters INTEGER,
    embedding INTEGER
)"""
# Columns added after the first release, appended to older databases as they open (their
# files are then read again: the new column has no value before).
_ADDED_COLUMNS = {"active_parameters": "INTEGER", "embedding": "INTEGER"}

# Quality reports (``quantdesk eval``), one per model file, valid while the file is unchanged.
_QUALITY_SCHEMA = """
CREATE TABLE IF NOT EXISTS quality (
    path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, base TEXT NOT NULL,
    settings TEXT NOT NULL, stats TEXT NOT NULL, measured REAL NOT NULL
)"""


@dataclass(frozen=True)
class QualityRecord:
    """A stored quality report of a model file against its base.

    Attributes:
        base: The base model file it was measured against.
        settings: The text and chunking (``text``, ``n_ctx``, ``chunks``...).
        stats: :meth:`models.quality.kld.QualityStats.to_dict`'s numbers.
        measured: When (seconds since the epoch).
    """

    base: str
    settings: dict
    stats: dict
    measured: float


@dataclass(frozen=True)
class LibraryModel:
    """One row of the library."""

    path: str
    kind: str  # "gguf" or "safetensors"
    source: str  # one of SOURCES
    name: str
    size: int
    mtime_ns: int
    architecture: Optional[str]
    parameters: Optional[int]
    file_type: Optional[int]
    quant: Optional[str]
    context_length: Optional[int]
    chat_template: bool
    files: str  # JSON list of every file the model consists of
    error: Optional[str]  # why metadata could not be read, if so
    added: float
    #: Parameters one token uses: fewer than ``parameters`` for a mixture of experts.
    active_parameters: Optional[int] = None
    #: An embedding model (an encoder, or a pooling type in its header): it makes vectors,
    #: not replies (:func:`models.gguf_header.is_embedding_model`).
    embedding: bool = False

    @property
    def file_list(self) -> list[Path]:
        return [Path(p) for p in json.loads(self.files)]

    @property
    def is_projector(self) -> bool:
        """A vision (or audio) encoder, llama.cpp's ``clip`` architecture: part of an
        image-text model, loaded beside it (:mod:`models.projector`), never on its own."""
        return self.kind == "gguf" and self.architecture == "clip"


@dataclass(frozen=True)
class ScanStats:
    """What a scan did: rows added, re-read, unchanged and removed."""

    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0


def quant_name(file_type: Optional[int]) -> Optional[str]:
    """``general.file_type`` → ``Q4_K_M``, ``F16``...; ``None`` when unknown."""
    if file_type is None:
        return None
    try:
        name = LlamaFileType(file_type).name
    except ValueError:
        return f"type {file_type}"
    return name.split("_", 1)[1] if name.startswith(("MOSTLY_", "ALL_")) else name


def _shards(first: Path) -> list[Path]:
    match = _SHARD.search(first.name)
    if not match:
        return [first]
    count = int(match[2])
    stem = first.name[:match.start()]
    return [first.with_name(f"{stem}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]


def _stat(files: list[Path]) -> tuple[int, int]:
    stats = [f.stat() for f in files]
    return sum(s.st_size for s in stats), max(s.st_mtime_ns for s in stats)


def _gguf_fields(files: list[Path]) -> dict:
    header = read_gguf_header(files[0])
    others = [read_gguf_header(f) for f in files[1:]]
    params = header.parameter_count + sum(h.parameter_count for h in others)
    # shards after the first carry no expert counts: the first's apply to all
    active = header.active_share((t.name, t.n_elements) for h in [header, *others] for t in h.tensors)
    file_type = header.metadata.get("general.file_type")
    return dict(
        architecture=header.architecture or None,
        parameters=params,
        active_parameters=active,
        file_type=file_type,
        quant=quant_name(file_type),
        context_length=header.arch_value("context_length"),
        chat_template=bool(header.metadata.get("tokenizer.chat_template")),
        name=str(header.metadata.get("general.name") or files[0].stem),
        embedding=is_embedding_model(header.metadata),
    )


def _safetensors_fields(folder: Path) -> dict:
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    text = config.get("text_config", config)
    template = (folder / "chat_template.jinja").exists()
    with contextlib.suppress(OSError, ValueError):
        template = template or "chat_template" in json.loads(
            (folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    return dict(
        architecture=(config.get("architectures") or [config.get("model_type")])[0],
        parameters=None, active_parameters=None,
        file_type=None, quant=str(config.get("torch_dtype") or config.get("dtype") or "")
        or None, context_length=text.get("max_position_embeddings"), chat_template=template,
        name=folder.name, embedding=False,
    )


def _model_files(path: Path) -> tuple[str, list[Path]]:
    """Kind and member files of the model at ``path`` (a .gguf file or a checkpoint folder)."""
    if path.is_dir():
        weights = sorted(path.glob("*.safetensors"))
        if not (path / "config.json").exists() or not weights:
            raise QuantDeskError(f"{path} is a folder without config.json and .safetensors files.",
                                 "Choose a .gguf file or a Hugging Face model folder.")
        return "safetensors", weights
    if path.suffix.lower() != ".gguf":
        raise QuantDeskError(f"{path.name} is not a model QuantDesk can use.",
                             "Choose a .gguf file or a Hugging Face model folder (safetensors).")
    return "gguf", _shards(path)


class Library:
    """The index of models on disk. Cheap to create; every method opens the database."""

    def __init__(self, models_dir: Optional[Path] = None) -> None:
        self.models_dir = Path(models_dir or app_paths().ensure().models).resolve()
        self.models_dir.mkdir(parents=True, exist_ok=True)
        self.db_path = self.models_dir / DB_NAME
        with self._db() as db:
            db.execute(_SCHEMA)
            present = {row[1] for row in db.execute("PRAGMA table_info(models)")}
            for column, kind in _ADDED_COLUMNS.items():
                if column not in present:
                    db.execute(f"ALTER TABLE models ADD COLUMN {column} {kind}")
                    db.execute("UPDATE models SET mtime_ns = -1")  # read each file again
            db.execute(_QUALITY_SCHEMA)

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.db_path, timeout=10)
        try:
            with db:
                yield db
        finally:
            db.close()

    def models(self) -> list[LibraryModel]:
        """Every model in the index, by name."""
        with self._db() as db:
            rows = db.execute(f"SELECT {', '.join(f.name for f in fields(LibraryModel))} "
                              "FROM models ORDER BY name COLLATE NOCASE, path").fetchall()
        return [LibraryModel(*row[:11], bool(row[11]), *row[12:-1], bool(row[-1])) for row in rows]

    def get(self, path: Path) -> Optional[LibraryModel]:
        """The row for ``path`` (resolved), or ``None``."""
        key = str(Path(path).resolve())
        return next((m for m in self.models() if m.path == key), None)

    def _discover(self) -> dict[Path, str]:
        """Model paths inside the models folder → their source."""
        found: dict[Path, str] = {}
        for root, dirs, names in os.walk(self.models_dir):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            here = Path(root)
            downloaded = here.is_relative_to(self.models_dir / "hub")
            if "config.json" in names and any(n.endswith(".safetensors") for n in names):
                found[here] = "downloaded" if downloaded else "converted"
            for name in names:
                if name.startswith(".") or not name.lower().endswith(".gguf"):
                    continue  # partial downloads are hidden files
                match = _SHARD.search(name)
                if match and int(match[1]) != 1:
                    continue
                found[here / name] = "downloaded" if downloaded else ""
        return found

    def scan(self) -> ScanStats:
        """Bring the index up to date with the disk, re-reading only changed files."""
        found = self._discover()
        with self._db() as db:
            known = {row[0]: row[1:] for row in db.execute("SELECT path, size, mtime_ns, source FROM models")}
        for path_str, (_, _, source) in known.items():
            if not Path(path_str).is_relative_to(self.models_dir):
                # Added from elsewhere (imported, or written there by the converter or
                # quantizer): kept while it exists, whatever its source.
                found.setdefault(Path(path_str), source)
        added = updated = unchanged = removed = 0
        rows: list[dict] = []
        for path, source in found.items():
            key = str(path)
            try:
                kind, files = _model_files(path)
                size, mtime = _stat(files)
            except (OSError, QuantDeskError):
                continue  # vanished or incomplete: dropped below
            if key in known and known[key][:2] == (size, mtime):
                unchanged += 1
                continue
            source = known[key][2] if key in known else source
            rows.append(self._row(path, kind, files, size, mtime, source))
            updated, added = (updated + 1, added) if key in known else (updated, added + 1)
        present = {str(p) for p in found}
        with self._db() as db:  # one transaction: one fsync for the whole scan
            self._store(db, rows)
            for key in known:
                if key not in present or not self._exists(key):
                    db.execute("DELETE FROM models WHERE path = ?", (key,))
                    removed += 1
        return ScanStats(added, updated, unchanged, removed)

    @staticmethod
    def _exists(key: str) -> bool:
        path = Path(key)
        try:
            _model_files(path)
            return path.exists()
        except QuantDeskError:
            return False

    def _row(self, path: Path, kind: str, files: list[Path], size: int, mtime: int, source: str) -> dict:
        """The index row for a model, its header read now."""
        error = None
        try:
            meta = _gguf_fields(files) if kind == "gguf" else _safetensors_fields(path)
        except (QuantDeskError, OSError, ValueError) as exc:
            error = str(exc)
            meta = dict(architecture=None, parameters=None, active_parameters=None, file_type=None, quant=None,
                        context_length=None, chat_template=False, name=path.name,
                        embedding=False)
        if not source:
            source = "converted" if meta["file_type"] in _FLOAT_FILE_TYPES else "quantized"
        row = dict(path=str(path), kind=kind, source=source, size=size, mtime_ns=mtime,
                   files=json.dumps([str(f) for f in files]), error=error, added=time.time(), **meta)
        row["chat_template"] = int(bool(row["chat_template"]))
        row["embedding"] = int(bool(row["embedding"]))
        return row

    @staticmethod
    def _store(db: sqlite3.Connection, rows: list[dict]) -> None:
        for row in rows:
            db.execute(f"INSERT OR REPLACE INTO models ({', '.join(row)}) "
                       f"VALUES ({', '.join('?' * len(row))})", tuple(row.values()))

    def add(self, path: Path, source: str) -> LibraryModel:
        """Index ``path`` now with an explicit source (the converter and quantizer call this)."""
        if source not in SOURCES:
            raise ValueError(f"unknown source {source!r}")
        path = Path(path).expanduser().resolve()
        if not path.exists():
            raise QuantDeskError(f"{path} does not exist.", "Check the path and try again.")
        kind, files = _model_files(path)
        missing = [f.name for f in files if not f.exists()]
        if missing:
            raise QuantDeskError(f"{path.name} is split in parts and {', '.join(missing)} is missing.",
                                 "Put all parts in the same folder, then import again.")
        size, mtime = _stat(files)
        row = self._row(path, kind, files, size, mtime, source)
        with self._db() as db:
            self._store(db, [row])
        model = self.get(path)
        assert model is not None
        if model.error:
            with self._db() as db:
                db.execute("DELETE FROM models WHERE path = ?", (str(path),))
            raise QuantDeskError(f"{path.name} could not be read as a model: {model.error}")
        return model

    def record_output(self, path: Path, source: str) -> Optional[LibraryModel]:
        """Index a model QuantDesk just wrote (``converted`` or ``quantized``), wherever it is.

        The file is complete and valid when this is called, so a failure to index it
        (a locked database, say) is logged and ``None`` returned rather than failing the
        job: the next scan or an import finds it again.
        """
        try:
            return self.add(path, source)
        except (QuantDeskError, OSError, sqlite3.Error) as exc:
            log.warning("could not add %s to the library: %s", path, exc)
            return None

    def import_path(self, path: Path) -> LibraryModel:
        """Add a model the user points at (drag and drop); it stays where it is."""
        path = Path(path).expanduser().resolve()
        source = "imported"
        if path.is_relative_to(self.models_dir):
            source = "downloaded" if path.is_relative_to(self.models_dir / "hub") else ""
        return self.add(path, source or "quantized")

    def remove(self, path: Path) -> list[Path]:
        """Drop a model from the index; delete its files if they are in the models folder.

        Returns the files deleted: none for a model outside the models folder (imported,
        or converted/quantized to a folder the user chose), which is only forgotten.
        """
        model = self.get(path)
        if model is None:
            raise QuantDeskError(f"{path} is not in the library.", "Run `quantdesk list` to see its models.")
        deleted = []
        target = Path(model.path)
        if target.is_relative_to(self.models_dir):
            if target.is_dir():
                shutil.rmtree(target)
                deleted.append(target)
            else:
                for f in model.file_list:
                    f.unlink(missing_ok=True)
                    deleted.append(f)
        with self._db() as db:
            db.execute("DELETE FROM models WHERE path = ?", (model.path,))
        return deleted

    def record_quality(self, path: Path, base: Path, settings: dict, stats: dict) -> None:
        """Store ``path``'s quality report (replacing an older one), so it is measured once."""
        path = Path(path).resolve()
        st = path.stat()
        with self._db() as db:
            db.execute("INSERT OR REPLACE INTO quality VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (str(path), st.st_size, st.st_mtime_ns, str(Path(base).resolve()),
                        json.dumps(settings, sort_keys=True), json.dumps(stats), time.time()))

    def quality(self, path: Path) -> Optional[QualityRecord]:
        """``path``'s stored quality report, or ``None`` (none, or the file changed since)."""
        path = Path(path).resolve()
        return self._quality_where("path = ?", (str(path),)).get(str(path))

    def quality_reports(self, base: Optional[Path] = None) -> dict[str, QualityRecord]:
        """Every stored quality report still valid (its file unchanged), by file path; only
        those measured against ``base`` when it is given (the quants of one source)."""
        if base is None:
            return self._quality_where("1", ())
        return self._quality_where("base = ?", (str(Path(base).resolve()),))

    def _quality_where(self, condition: str, values: tuple) -> dict[str, QualityRecord]:
        with self._db() as db:
            rows = db.execute("SELECT path, size, mtime_ns, base, settings, stats, measured FROM quality "
                              f"WHERE {condition}", values).fetchall()
        found = {}
        for row in rows:
            try:
                st = Path(row[0]).stat()
            except OSError:
                continue
            if (st.st_size, st.st_mtime_ns) == (row[1], row[2]):
                found[row[0]] = QualityRecord(row[3], json.loads(row[4]), json.loads(row[5]), row[6])
        return found
