"""User-facing errors.

An error a user can meet is a :class:`QuantDeskError` whose message is a sentence a
person understands: what happened, which file or setting, and what to do about it. It
is raised at the boundary where the fact is known; the CLI prints it without a
traceback and the GUI shows it in a dialog. Programming errors stay ordinary
exceptions, so they are never mistaken for a user's problem.
"""

from __future__ import annotations

from typing import Optional


class QuantDeskError(Exception):
    """An error with a message meant for the user.

    Args:
        what: What went wrong, naming the file or setting concerned.
        fix: What the user can do about it, or ``None`` when nothing helps.
    """

    def __init__(self, what: str, fix: Optional[str] = None) -> None:
        self.what = what
        self.fix = fix
        super().__init__(self.user_message)

    @property
    def user_message(self) -> str:
        """The whole sentence shown to the user."""
        return f"{self.what} {self.fix}" if self.fix else self.what


class Cancelled(QuantDeskError):
    """The user cancelled the job; nothing was written."""

    def __init__(self) -> None:
        super().__init__("Cancelled; no output was written.")
