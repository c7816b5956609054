"""Calibration and evaluation text: the built-in one, or a file the user picks.

The text is kept as bytes, as llama.cpp's ``-f`` reads it (one trailing newline removed),
so both tokenize exactly the same input. The built-in text ships with QuantDesk
(``assets/text/``), so measuring never needs the network; ``packaging/make_builtin_text.py``
says how it was made.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

from models.foundation.errors import QuantDeskError

BUILTIN_NAME = "quantdesk-builtin-v1"
_BUILTIN_FILE = Path(__file__).resolve().parents[2] / "assets" / "text" / "calibration-v1.txt.gz"


@dataclass(frozen=True)
class EvalText:
    """A text to measure on.

    Attributes:
        name: How it is named in files and messages (the path as given, or the built-in
            text's name); recorded in ``imatrix.datasets``.
        data: Its bytes, one trailing newline removed (llama.cpp's ``-f``).
    """

    name: str
    data: bytes

    @property
    def is_builtin(self) -> bool:
        """Whether this is the text that ships with QuantDesk."""
        return self.name == BUILTIN_NAME


def _strip_newline(data: bytes) -> bytes:
    return data[:-1] if data.endswith(b"\n") else data


def read_text(path: "str | Path") -> EvalText:
    """The text file ``path`` (any encoding llama.cpp's tokenizer takes; UTF-8 usually).

    Raises:
        QuantDeskError: it cannot be read or is empty.
    """
    path_text = str(path)
    try:
        data = Path(path).read_bytes()
    except IsADirectoryError:
        raise QuantDeskError(f"{path_text} is a folder, not a text file.", "Give a .txt file.") from None
    except OSError as exc:
        raise QuantDeskError(f"Cannot read the text file {path_text} ({exc.strerror}).",
                             "Check the path.") from exc
    if not data.strip():
        raise QuantDeskError(f"The text file {path_text} is empty.", "Give a file with text in it.")
    return EvalText(path_text, _strip_newline(data))


def builtin_text() -> EvalText:
    """The text that ships with QuantDesk.

    Raises:
        QuantDeskError: the installation lacks it.
    """
    try:
        data = gzip.decompress(_BUILTIN_FILE.read_bytes())
    except (OSError, EOFError) as exc:
        raise QuantDeskError(f"The built-in calibration text {_BUILTIN_FILE} is missing or damaged.",
                             "Reinstall QuantDesk, or give a text file with --text.") from exc
    return EvalText(BUILTIN_NAME, _strip_newline(data))


def resolve_text(path: "str | Path | None") -> EvalText:
    """``path``'s text, or the built-in text when ``path`` is ``None``."""
    return builtin_text() if path is None else read_text(path)
