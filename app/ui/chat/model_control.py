"""The Chat page's model: loading and reloading it, its load progress and settings, and
what reopening a conversation does about the model it was written with (load it, offer
it in the banner, or explain a file that has gone).

A mixin of :class:`~app.ui.chat.page.ChatPage`: it works on the page's ``engine``,
``panel``, ``banner`` and conversation state. The Library's list and a model's header
are read off the GUI thread (``_run``); the decisions about a conversation's model are
the Qt-free :mod:`app.core.conversation_model`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

from models.foundation.errors import QuantDeskError
from models.projector import with_projector

log = logging.getLogger(__name__)


class ModelControl:
    """Loading, reloading and offering models; see the module docstring."""

    @staticmethod
    def _scan_library():
        """The Library's models and their stored quality reports (read off the GUI thread)."""
        from models.library import Library

        library = Library()
        library.scan()
        # A vision encoder (mmproj) loads with its model: it is not a model to pick.
        return [m for m in library.models() if not m.is_projector], library.quality_reports()

    def _library_arrived(self, listing: tuple) -> None:
        """The background Library scan's list: into the picker; and a reopened
        conversation whose relative model path was not found yet is looked at again."""
        models, quality = listing
        self.panel.set_library(models, quality)
        waiting, self._awaiting_library = self._awaiting_library, None
        if waiting is not None and waiting[0] == self.conversation_id and self._model_notice \
                and self.banner.text() == self._model_notice:
            self._follow_conversation_model(waiting[1])

    def open_path(self, path: Path) -> None:
        """The window's "open this path" entry: a ``.gguf`` is loaded, a picture attached
        to the next message; then the box has the focus."""
        from app.core.open_path import is_image_file

        self.ensure_started()
        if is_image_file(path):
            self.composer.attach_file(Path(path))
            return self.focus_message_box()
        self._opened_model = Path(path).resolve()  # joins the Library once it has loaded
        self.panel.show_model(Path(path))
        self.load_model(Path(path))
        self.focus_message_box()

    def _add_opened_model(self, path: Path) -> None:
        """Add the model opened in the window to the Library (off the GUI thread), and say
        so under the load status, with an Undo."""
        from app.core.open_path import add_opened_model

        def added(model) -> None:
            if model is None or self.engine.model_path is None \
                    or Path(self.engine.model_path).resolve() != path:
                return  # known already, or another model was chosen meanwhile
            self._added_to_library = path
            self.panel.show_library_note(
                f"{path.name} is now in the Library: the Models page and the server list it "
                "from now on. The file stays where it is.", undo=True)

        self._run(lambda: add_opened_model(path), added,
                  lambda message: log.warning("opened model not added to the Library: %s", message))

    def _undo_library(self) -> None:
        """The note's Undo: the Library forgets the file (which stays on disk)."""
        from app.core.open_path import forget_opened_model

        path, self._added_to_library = self._added_to_library, None
        self.panel.show_library_note()
        if path is not None:
            self._run(lambda: forget_opened_model(path), lambda _: self.panel.show_library_note(
                f"{path.name} is no longer in the Library (the file is still there)."))

    @property
    def model_path(self) -> Optional[Path]:
        """The model loaded or being loaded."""
        return self.engine.model_path

    def _model_chosen(self, _row: int) -> None:
        path = self.panel.current_model()
        if path is not None and path != self.engine.model_path:
            self.load_model(path)

    def load_model(self, path: Path, settings=None) -> None:
        """Load ``path`` (with its remembered settings unless ``settings``)."""
        from app.core import model_settings

        self._clear_model_notice()  # a model was chosen: the offer or warning has had its say
        self.panel.show_library_note()  # and its Undo: another model is coming
        self._added_to_library = None
        if self.engine.streaming:
            self.engine.stop()  # a new model ends the reply in progress
        if self.engine.loading:
            self._pending_load = path
            return
        if settings is None:
            settings = model_settings.load_settings_for(path)
        settings = with_projector(path, settings)  # the chosen encoder, else the one beside
        self.composer.set_vision(False, "The model is loading.")
        self.panel.load_form.set_settings(settings)
        self.panel.progress.setRange(0, 0)  # busy until the first fraction arrives
        self.panel.progress.show()
        self.panel.set_status(f"Loading {path.name}…")
        self.engine.load(path, settings)
        self._run(lambda: _machine_facts(path), lambda facts: self._machine_read(path, facts),
                  lambda message: self._machine_read(path, None, message))

    def _machine_read(self, path: Path, facts, message: str = "") -> None:
        """The background read of ``path``'s header arrived: shown only if ``path`` is still
        the model (after a quick switch the first model's read can arrive last)."""
        if self.engine.model_path != path:
            return
        if facts is None:
            self.panel.load_form.verdict.setText(message)
        else:
            self.panel.load_form.set_machine(*facts)

    def _load_progress(self, progress) -> None:
        """llama.cpp's progress reading the tensors, then the self-test decode."""
        if progress.stage == "Loading":
            self.panel.progress.setRange(0, 100)
            self.panel.progress.setValue(round(100 * (progress.fraction or 0.0)))
            self.panel.set_status(f"Loading {progress.detail}…")
        else:
            self.panel.progress.setRange(0, 0)
            self.panel.set_status(f"Loaded; testing {progress.detail}…")

    def _loaded(self, report) -> None:
        from app.core import model_settings

        log.info("chat: model loaded: %s", report.details())
        if self._pending_load is not None:
            path, self._pending_load = self._pending_load, None
            return self.load_model(path)
        self.panel.progress.hide()
        opened, self._opened_model = self._opened_model, None
        if opened is not None and Path(report.path).resolve() == opened:
            self._add_opened_model(opened)
        template = report.template
        note = "" if template == "the model's own" else \
            f" This model has no chat template of its own; QuantDesk formats the chat with its {template} preset."
        self.panel.set_status(f"Loaded in {report.load_seconds:.1f} s. {report.summary()}{note}",
                              report.details().replace("; ", "\n"))
        self._show_thinking_switch(self._stored_thinking())
        if report.settings.mmproj:
            self.composer.set_vision(True)
        else:
            self.composer.set_vision(False, f"{Path(report.path).name} reads text only: no vision "
                                            "encoder (mmproj file) was found beside it or chosen for "
                                            "it (Models page, Library: Vision encoder).")
        try:
            model_settings.remember_load_settings(report.path, report.settings)
        except QuantDeskError as exc:
            log.warning("load settings not remembered: %s", exc.user_message)
        if self.banner.level() == "error" and "engine" in self.banner.text():
            self.banner.clear()

    def _load_failed(self, message: str) -> None:
        self.composer.set_vision(False, "No model is loaded.")
        self.panel.progress.hide()
        self.panel.set_status("No model loaded.")
        self.banner.show_message(message, "error")
        self._pending_load = None
        self._opened_model = None

    def apply_load_settings(self) -> None:
        """Reload the model with the settings on the panel (remembered for this model)."""
        from app.core import model_settings

        path = self.panel.current_model()
        if path is None:
            return self.banner.show_message("Choose a model first.", "warning")
        new = self.panel.load_form.settings(self.engine.settings)
        changed = model_settings.fingerprint_changes(self.engine.settings, new)
        self.load_model(path, new)
        if changed:
            self.banner.show_message(
                f"The {', '.join(changed)} changed: saved conversation states made with the old "
                "settings cannot be reused, so those conversations are read again from their "
                "start once.", "info")

    def reload_model(self) -> None:
        """The crash banner's "Reload model"."""
        path = self.engine.model_path or self.panel.current_model()
        if path is not None:
            self.load_model(path, self.engine.settings)

    def _follow_conversation_model(self, recorded: Optional[str]) -> None:
        """Bring back the model a reopened conversation was written with: load it when
        none is loaded; offer it (never swap silently: a load is slow and drops the other
        model's state) when another is; explain a file that has gone."""
        from app.core.conversation_model import LOAD, MISSING, OFFER, choose_conversation_model
        from models.foundation.paths import app_paths

        self._clear_model_notice()
        engine = self.engine
        loaded = engine.model_path if (engine.ready or engine.loading) else None
        # A relative path (older CLIs) is looked for in the models folder and among the
        # Library's models as the picker lists them: the list the page read off the GUI
        # thread at start, so only a stat or two happen here.
        choice = choose_conversation_model(recorded, loaded, app_paths().models,
                                           self.panel.models.paths())
        if choice.relocated:
            self._record_conversation_model(choice.path)
        if choice.action == LOAD:
            self.panel.show_model(choice.path)
            self.load_model(choice.path)
        elif choice.action == OFFER:
            self._show_model_notice(choice.message, "info", choice.action_text,
                                    lambda: self._load_offered(choice))
        elif choice.action == MISSING:
            self._show_model_notice(choice.message, "warning")
            if not choice.path.is_absolute() and not self.panel.models.library_known:
                self._awaiting_library = (self.conversation_id, recorded)

    def _record_conversation_model(self, path: Path) -> None:
        """Store the file a relative recorded model path was found to be, so reopening
        the conversation finds it directly next time."""
        try:
            self.store.set_model(self.conversation_id, str(path))
        except QuantDeskError as exc:
            log.warning("conversation model not recorded: %s", exc.user_message)

    def _load_offered(self, choice) -> None:
        """The offer's button: load the conversation's model (not while a reply streams:
        the offer stays up for later)."""
        if self._refuse_while_streaming():
            return self._show_model_notice(choice.message, "info", choice.action_text,
                                           lambda: self._load_offered(choice))
        self.panel.show_model(choice.path)
        self.load_model(choice.path)

    def _show_model_notice(self, text: str, level: str, action_text=None, on_action=None) -> None:
        """Show a sentence about the conversation's model in the banner (remembered, so
        that only this sentence is cleared once it no longer applies)."""
        self._model_notice = text
        self.banner.show_message(text, level, action_text, on_action)

    def _clear_model_notice(self) -> None:
        """Hide the banner's sentence about a conversation's model, if it is still the one
        on show: a model was chosen, another conversation opened, or the chat went on."""
        if self._model_notice and self.banner.text() == self._model_notice:
            self.banner.clear()
        self._model_notice = ""
        self._awaiting_library = None


def _machine_facts(path: Path):
    """The model's header, this machine's free RAM/VRAM and whether it needs the safe CPU
    kernels (disk and device queries, so run off the GUI thread)."""
    from models.engine.fallback import needs_safe_kernels
    from models.gguf_header import read_gguf_header
    from models.memory_fit import free_memory

    return (read_gguf_header(path), *free_memory(), needs_safe_kernels())
