"""What reopening a saved conversation does about the model it was written with.

A conversation records the path of its model (:meth:`ConversationStore.model_of
<app.core.conversations.ConversationStore.model_of>`). Reopening it should bring that
model back, as LM Studio and Jan do, without surprising anyone: a load can take a long
time and drops the loaded model's state, so a *different* loaded model is never swapped
silently — the person is offered the load instead. A file that has gone is explained, and
the conversation still opens, to be continued with whatever model the person picks.

Older versions of the CLI recorded the model path as typed, so a conversation may hold a
*relative* path ("SmolLM2-Q4_K_M.gguf", "models/x.gguf"). Resolving that against the
GUI's working directory would find nothing (or the wrong file); it is looked for where a
person keeps models instead: in the models folder, then by file name among the models
the Library knows. A path found that way is :attr:`ModelChoice.relocated`, for the caller
to record back on the conversation so the next reopening needs no search.

Qt-free, so the decision and its sentences are tested without a display; the Chat page
acts on the :class:`ModelChoice`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

KEEP = "keep"        # no model recorded, or the recorded one is loaded (or loading)
LOAD = "load"        # nothing is loaded: load the recorded model now
OFFER = "offer"      # another model is loaded: offer to load the recorded one
MISSING = "missing"  # the recorded file is gone: say so; the conversation still opens


@dataclass(frozen=True)
class ModelChoice:
    """What to do about a reopened conversation's model.

    Attributes:
        action: :data:`KEEP`, :data:`LOAD`, :data:`OFFER` or :data:`MISSING`.
        path: The conversation's model file (``None`` when none was recorded).
        message: The sentence to show for :data:`OFFER` and :data:`MISSING` ("" otherwise).
        relocated: ``path`` was found for a relative recorded path (in the models folder
            or the Library): record it back as the conversation's model.
    """

    action: str
    path: Optional[Path] = None
    message: str = ""
    relocated: bool = False

    @property
    def action_text(self) -> str:
        """The offer's button text, naming the model to load."""
        return f"Load {self.path.stem}" if self.path is not None else ""


def choose_conversation_model(recorded: Optional[str], loaded: Optional[Path],
                              models_folder: Optional[Path] = None,
                              library: Iterable[Path | str] = ()) -> ModelChoice:
    """Decide what reopening a conversation does about its model.

    Args:
        recorded: The conversation's model path as stored (``None``: none recorded, as in
            conversations saved before any model answered).
        loaded: The model the chat engine has loaded or is loading (``None``: none).
        models_folder: Where a relative ``recorded`` path is looked for first.
        library: The model files the Library knows (already read: the caller's list, so
            nothing here reads the index); a relative ``recorded`` path is looked for
            among them by file name when the models folder does not hold it.

    Returns:
        The :class:`ModelChoice`, its path resolved (symbolic links followed), the form
        the Library and the model picker use, so one file is one model however it was
        named. Resolving and a ``stat`` per place looked in are the only disk access.
    """
    if not recorded:
        return ModelChoice(KEEP)
    written = Path(recorded).expanduser()
    relocated = not written.is_absolute()
    if relocated:
        found = find_relative_model(written, models_folder, library)
        if found is None:
            return ModelChoice(MISSING, written, _not_found(written, models_folder))
        path = found
    else:
        path = written.resolve()
    if loaded is not None and Path(loaded).resolve() == path:
        return ModelChoice(KEEP, path, relocated=relocated)
    if not path.is_file():
        return ModelChoice(MISSING, path, (
            f"This conversation's model, {path}, is no longer there (moved or deleted). "
            "Choose another model in the Model list to continue it; to use the same one, put "
            "the file back and reopen the conversation."))
    if loaded is None:
        return ModelChoice(LOAD, path, relocated=relocated)
    return ModelChoice(OFFER, path, (
        f"This conversation was written with {path.name}. {Path(loaded).name} is loaded "
        "now and will answer what you send next."), relocated=relocated)


def find_relative_model(written: Path, models_folder: Optional[Path],
                        library: Iterable[Path | str] = ()) -> Optional[Path]:
    """The file a relative recorded model path means, resolved, or ``None``.

    Looked for, in this order: the path under the models folder ("models/x.gguf" →
    ``<models folder>/models/x.gguf``), the file name in the models folder, then the
    Library's models with that file name — the one inside the models folder first when
    several share it, else the first in the Library's order.
    """
    candidates = []
    if models_folder is not None:
        candidates += [Path(models_folder) / written, Path(models_folder) / written.name]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    named = [Path(p) for p in library if Path(p).name == written.name]
    if models_folder is not None and len(named) > 1:
        folder = Path(models_folder).resolve()
        named.sort(key=lambda p: not p.is_relative_to(folder))  # stable: else Library order
    for candidate in named:
        if candidate.is_file():
            return candidate.resolve()
    return None


def _not_found(written: Path, models_folder: Optional[Path]) -> str:
    where = f"the models folder ({models_folder})" if models_folder is not None else "the models folder"
    return (f"This conversation's model was saved as {written}, without its folder, and no file "
            f"of that name is in {where} or the Library. Choose another model in the Model list "
            "to continue it; to use the same one, put the file in the models folder (or import "
            "it in the Library) and reopen the conversation.")
