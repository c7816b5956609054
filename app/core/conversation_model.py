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
        The :class:`ModelChoice`. The recorded file is looked at on disk (one ``stat``)
        only when it is not the loaded model.
    """
    if not recorded:
        return ModelChoice(KEEP)
    path = Path(recorded)
    if loaded is not None and Path(loaded) == path:
        return ModelChoice(KEEP, path)
    if not path.is_file():
        return ModelChoice(MISSING, path, (
            f"This conversation was written with {path.name}, but {path} is no longer there "
            "(moved or deleted). You can read it and continue it with another model: choose "
            "one in the Model list. If you put the file back, reopen the conversation."))
    if loaded is None:
        return ModelChoice(LOAD, path)
    other = Path(loaded).name
    return ModelChoice(OFFER, path, (
        f"This conversation was written with {path.name}, and {other} is loaded now: "
        f"continue with {other}, or load {path.name}."))
