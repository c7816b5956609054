"""What reopening a saved conversation does about the model it was written with.

A conversation records the path of its model (:meth:`ConversationStore.model_of
<app.core.conversations.ConversationStore.model_of>`). Reopening it should bring that
model back, as LM Studio and Jan do, without surprising anyone: a load can take a long
time and drops the loaded model's state, so a *different* loaded model is never swapped
silently — the person is offered the load instead. A file that has gone is explained, and
the conversation still opens, to be continued with whatever model the person picks.

Qt-free, so the decision and its sentences are tested without a display; the Chat page
acts on the :class:`ModelChoice`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

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
    """

    action: str
    path: Optional[Path] = None
    message: str = ""

    @property
    def action_text(self) -> str:
        """The offer's button text, naming the model to load."""
        return f"Load {self.path.stem}" if self.path is not None else ""


def choose_conversation_model(recorded: Optional[str], loaded: Optional[Path]) -> ModelChoice:
    """Decide what reopening a conversation does about its model.

    Args:
        recorded: The conversation's model path as stored (``None``: none recorded, as in
            conversations saved before any model answered).
        loaded: The model the chat engine has loaded or is loading (``None``: none).

    Returns:
        The :class:`ModelChoice`, its path resolved (symbolic links followed), the form
        the Library and the model picker use, so one file is one model however it was
        named. Resolving and one ``stat`` are the only disk access.
    """
    if not recorded:
        return ModelChoice(KEEP)
    path = Path(recorded).expanduser().resolve()
    if loaded is not None and Path(loaded).resolve() == path:
        return ModelChoice(KEEP, path)
    if not path.is_file():
        return ModelChoice(MISSING, path, (
            f"This conversation's model, {path}, is no longer there (moved or deleted). "
            "Choose another model in the Model list to continue it; to use the same one, put "
            "the file back and reopen the conversation."))
    if loaded is None:
        return ModelChoice(LOAD, path)
    return ModelChoice(OFFER, path, (
        f"This conversation was written with {path.name}. {Path(loaded).name} is loaded "
        "now and will answer what you send next."))
