"""The Chat page's per-conversation settings: the system prompt, sampling and JSON mode a
conversation is stored with, the sampling new chats start from, and saved presets.

A mixin of :class:`~app.ui.chat.page.ChatPage` over its ``panel`` (the forms) and
``store``; edits are saved shortly after they stop (the page's settings timer).
"""

from __future__ import annotations

import logging

from models.foundation.errors import QuantDeskError

log = logging.getLogger(__name__)

SAMPLING_KEY = "chat_sampling"


class ConversationSettings:
    """A conversation's own settings on the panel, stored and restored."""

    def _restore_sampling(self) -> None:
        """New chats start with the sampling last used (``chat_sampling`` preference)."""
        from app.core.model_settings import apply_preset
        from models.engine.options import ChatOptions

        saved = self._preferences().get(SAMPLING_KEY)
        if isinstance(saved, dict):
            try:
                self.panel.sampling.set_options(apply_preset(ChatOptions(), saved))
            except (TypeError, ValueError):
                log.warning("ignoring unreadable %s preference", SAMPLING_KEY)

    def conversation_settings(self) -> dict:
        sampling = self.panel.sampling.options()
        from app.core.model_settings import sampling_of

        return {"system_prompt": self.panel.system_prompt.toPlainText(),
                "sampling": sampling_of(sampling),
                "json_mode": self.panel.json_mode.enabled.isChecked(),
                "schema_text": self.panel.json_mode.schema.toPlainText(),
                "schema_strict": self.panel.json_mode.strict.isChecked(),
                "thinking": self.panel.sampling.thinking_choice()}

    def _show_thinking_switch(self, chosen=None) -> None:
        """The thinking switch for the loaded model: shown when its template has one, set
        to the conversation's choice (``None``: the template's default)."""
        thinking = self.engine.thinking
        self.panel.sampling.show_thinking(thinking.switch is not None,
                                          thinking.default_on if chosen is None else chosen)

    def _stored_thinking(self):
        """The conversation's thinking choice as stored (``None``: none made)."""
        if self.store is None or not self.stored:
            return None
        try:
            return self.store.settings(self.conversation_id).get("thinking")
        except QuantDeskError:
            return None

    def _apply_conversation_settings(self, values: dict) -> None:
        from app.core.model_settings import apply_preset
        from models.engine.options import ChatOptions

        panel = self.panel
        for widget in (panel.sampling, panel.system_prompt, panel.json_mode):
            widget.blockSignals(True)
        if values.get("sampling"):
            panel.sampling.set_options(apply_preset(ChatOptions(), values["sampling"]))
        panel.system_prompt.setPlainText(values.get("system_prompt", ""))
        panel.json_mode.enabled.setChecked(bool(values.get("json_mode")))
        panel.json_mode.schema.setPlainText(values.get("schema_text", ""))
        panel.json_mode.strict.setChecked(values.get("schema_strict", True) is not False)
        self._show_thinking_switch(values.get("thinking"))
        for widget in (panel.sampling, panel.system_prompt, panel.json_mode):
            widget.blockSignals(False)
        panel.json_mode.check()

    def _save_conversation_settings(self) -> None:
        from app.core.model_settings import sampling_of

        prefs = self._preferences()
        if prefs:
            try:
                prefs.set(SAMPLING_KEY, sampling_of(self.panel.sampling.options()))
            except QuantDeskError as exc:
                log.warning("sampling not remembered: %s", exc.user_message)
        if self.store is not None and self.stored:
            try:
                self.store.set_settings(self.conversation_id, self.conversation_settings())
            except QuantDeskError as exc:
                log.warning("conversation settings not saved: %s", exc.user_message)

    def _save_preset(self) -> None:
        from app.core.model_settings import save_preset

        try:
            save_preset(self.panel.sampling.preset_name.text(), self.panel.sampling.options())
        except QuantDeskError as exc:
            return self.banner.show_message(exc.user_message, "warning")
        self.panel.sampling.reload_presets()
        self.panel.sampling.preset.setCurrentText(self.panel.sampling.preset_name.text().strip())
