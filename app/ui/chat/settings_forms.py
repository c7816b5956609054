"""The sampling and JSON-mode forms of the chat's side panel (its load settings form is
:mod:`app.ui.widgets.load_settings_form`, shared with the Settings page).

They only collect choices and show their consequences at once — the memory-fit verdict
while a slider moves, schema errors while typing. Imported when the panel's sections are
first built (they pull in the engine package and numpy), not at start-up.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Optional

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QHBoxLayout,
                               QLabel, QLineEdit, QPlainTextEdit, QPushButton, QSpinBox,
                               QVBoxLayout, QWidget)

from app.core import model_settings
from models.engine.options import ChatOptions

class SamplingForm(QWidget):
    """Temperature, top-p/k, min-p, repeat penalty, seed, max tokens, stop strings, presets,
    and thinking on or off for a reasoning model whose template has the switch."""

    changed = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        self.preset = QComboBox()
        self.preset.setAccessibleName("Preset")
        self.temperature = self._double(0, 5, 0.05, "Temperature")
        self.top_p = self._double(0.01, 1, 0.01, "Top-p")
        self.min_p = self._double(0, 0.99, 0.01, "Min-p")
        self.repeat = self._double(0.5, 3, 0.01, "Repeat penalty")
        self.top_k = QSpinBox()
        self.top_k.setRange(0, 1000)
        self.top_k.setAccessibleName("Top-k")
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(1, 1 << 20)
        self.max_tokens.setAccessibleName("Max tokens")
        self.seed = QLineEdit()
        self.seed.setPlaceholderText("random")
        self.seed.setAccessibleName("Seed")
        self.stop = QLineEdit()
        self.stop.setPlaceholderText("none (separate several with |)")
        self.stop.setAccessibleName("Stop strings")
        self.speculative = QComboBox()
        self.speculative.setAccessibleName("Speculative decoding")
        for label, mode in (("prompt lookup", "prompt_lookup"), ("off", "off"),
                            ("draft model", "draft_model")):
            self.speculative.addItem(label, mode)
        self.speculative.setToolTip("Guess several tokens and check them in one pass: the reply "
                                    "is the same, often faster. Prompt lookup guesses from the "
                                    "conversation and drafts less where that fails; the draft "
                                    "model is set in the load settings.")
        self.thinking = QCheckBox("Think before answering")
        self.thinking.setAccessibleName("Thinking")
        self.thinking.setToolTip("A reasoning model writes its thinking (shown folded above the "
                                 "answer) before answering; off, it answers at once. Kept "
                                 "with the conversation.")
        self.preset_name = QLineEdit()
        self.preset_name.setPlaceholderText("preset name")
        self.save_preset = QPushButton("Save preset")
        row = QHBoxLayout()
        row.addWidget(self.preset_name, 1)
        row.addWidget(self.save_preset)
        form.addRow("Preset", self.preset)
        form.addRow("Temperature", self.temperature)
        form.addRow("Top-p", self.top_p)
        form.addRow("Top-k", self.top_k)
        form.addRow("Min-p", self.min_p)
        form.addRow("Repeat penalty", self.repeat)
        form.addRow("Seed", self.seed)
        form.addRow("Max tokens", self.max_tokens)
        form.addRow("Stop strings", self.stop)
        form.addRow("Speculative", self.speculative)
        form.addRow("Thinking", self.thinking)
        form.setRowVisible(self.thinking, False)  # shown for models with the switch
        self._thinking_switch = False
        form.addRow(row)
        self.reload_presets()
        self.preset.activated.connect(self._preset_chosen)
        for spin in (self.temperature, self.top_p, self.min_p, self.repeat, self.top_k, self.max_tokens):
            spin.valueChanged.connect(self.changed)
        self.seed.textChanged.connect(self.changed)
        self.stop.textChanged.connect(self.changed)
        self.thinking.toggled.connect(self.changed)
        self.set_options(ChatOptions())

    def _double(self, low: float, high: float, step: float, name: str) -> QDoubleSpinBox:
        spin = QDoubleSpinBox()
        spin.setRange(low, high)
        spin.setSingleStep(step)
        spin.setDecimals(2)
        spin.setAccessibleName(name)
        return spin

    def reload_presets(self) -> None:
        self.preset.clear()
        self.preset.addItems(list(model_settings.presets()))

    def _preset_chosen(self, _row: int) -> None:
        preset = model_settings.presets().get(self.preset.currentText())
        if preset:
            self.set_options(model_settings.apply_preset(self.options(), preset))

    def set_options(self, options: ChatOptions) -> None:
        self.blockSignals(True)
        self.temperature.setValue(options.temperature)
        self.top_p.setValue(options.top_p)
        self.top_k.setValue(options.top_k)
        self.min_p.setValue(options.min_p)
        self.repeat.setValue(options.repeat_penalty)
        self.max_tokens.setValue(options.max_tokens)
        self.seed.setText("" if options.seed is None else str(options.seed))
        self.stop.setText("|".join(options.stop))
        self.blockSignals(False)
        self.changed.emit()

    def show_thinking(self, switch: bool, on: bool) -> None:
        """Show the thinking switch (for a model whose template has one) set to ``on``,
        or hide it."""
        self._thinking_switch = switch
        self.layout().setRowVisible(self.thinking, switch)
        self.thinking.blockSignals(True)
        self.thinking.setChecked(on)
        self.thinking.blockSignals(False)

    def thinking_choice(self) -> Optional[bool]:
        """Thinking on or off, or ``None`` (the template's default) without a switch."""
        return self.thinking.isChecked() if self._thinking_switch else None

    def options(self, base: Optional[ChatOptions] = None) -> ChatOptions:
        """The sampling on screen applied to ``base`` (a seed that is not a number is none)."""
        seed = self.seed.text().strip()
        return replace(base or ChatOptions(), temperature=round(self.temperature.value(), 2),
                       top_p=round(self.top_p.value(), 2), top_k=self.top_k.value(),
                       min_p=round(self.min_p.value(), 2), repeat_penalty=round(self.repeat.value(), 2),
                       seed=int(seed) if seed.isdigit() else None, max_tokens=self.max_tokens.value(),
                       stop=tuple(s for s in self.stop.text().split("|") if s),
                       speculative=self.speculative.currentData())


class JsonModeForm(QWidget):
    """The JSON mode toggle, its schema editor and the Strict switch; under the editor, as
    the person types, the verdict ``quantdesk schema check`` gives: enforced exactly, or
    each keyword the grammar would not enforce with its JSON pointer."""

    changed = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.enabled = QCheckBox("JSON mode")
        self.enabled.setAccessibleName("JSON mode")
        self.schema = QPlainTextEdit()
        self.schema.setAccessibleName("JSON schema")
        self.schema.setPlaceholderText("Empty: any JSON value. Or paste a JSON Schema.")
        self.schema.setMaximumHeight(160)
        self.strict = QCheckBox("Strict: refuse a schema not enforced exactly")
        self.strict.setAccessibleName("Strict schema")
        self.strict.setChecked(True)
        self.strict.setToolTip("Off: generate under what the grammar enforces, check the reply "
                               "against the whole schema, and say whether it matched.")
        self.problems = QLabel()
        self.problems.setObjectName("schemaProblems")
        self.problems.setWordWrap(True)
        self.problems.setAccessibleName("Schema problems")
        layout.addWidget(self.enabled)
        layout.addWidget(self.schema)
        layout.addWidget(self.strict)
        layout.addWidget(self.problems)
        self._pending: tuple[str, bool] | None = None  # the text and Strict being checked
        self._timer = QTimer(self, singleShot=True, interval=250)  # check after typing pauses
        self._timer.timeout.connect(self.check)
        self.schema.textChanged.connect(self._timer.start)
        self.schema.textChanged.connect(self.changed)
        self.enabled.toggled.connect(self.changed)
        self.enabled.toggled.connect(lambda _: self.check())
        self.strict.toggled.connect(self.changed)
        self.strict.toggled.connect(lambda _: self.check())

    def output_fields(self) -> dict:
        """ChatOptions fields for the mode on screen.

        Raises:
            QuantDeskError: The schema is not JSON, is malformed, or (Strict) uses
                keywords the grammar cannot enforce (each listed) — before anything is sent.
        """
        from models.foundation.errors import QuantDeskError

        if not self.enabled.isChecked():
            return dict(response_format="text")
        text = self.schema.toPlainText().strip()
        if not text:
            return dict(response_format="json")
        try:
            schema = json.loads(text)
        except json.JSONDecodeError as exc:
            raise QuantDeskError(f"The schema is not valid JSON (line {exc.lineno}, column "
                                 f"{exc.colno}: {exc.msg}).", "Fix it, or empty the box for any JSON.") from None
        from models.structured.constraint import constraint_for_schema

        allow = not self.strict.isChecked()
        constraint_for_schema(schema, allow_unsupported=allow)  # refusals before sending
        return dict(response_format="json_schema", schema=schema, allow_unsupported=allow)

    def check(self) -> None:
        """Show the schema's verdict under it. It is worked out off the GUI thread (a schema
        llguidance refuses takes a few dozen compiles to locate what it refuses); a verdict
        for text or a Strict setting that has changed since is dropped."""
        from app.ui.worker import start_job

        text = self.schema.toPlainText().strip()
        self._pending = None
        if not self.enabled.isChecked() or not text:
            self.problems.setText("")
            return
        try:
            schema = json.loads(text)
        except json.JSONDecodeError as exc:
            self.problems.setText(f"The schema is not valid JSON (line {exc.lineno}, column "
                                  f"{exc.colno}: {exc.msg}).")
            return
        strict = self.strict.isChecked()
        key = self._pending = (text, strict)
        QTimer.singleShot(300, self, lambda: self._pending == key and
                          self.problems.setText("Checking the schema…"))
        start_job(lambda _report, _cancel: verdict_text(schema, strict),
                  on_finished=lambda message: self._pending == key and self.problems.setText(message),
                  on_failed=lambda message: self._pending == key and self.problems.setText(message),
                  owner=self)


def verdict_text(schema, strict: bool) -> str:
    """What the Structured output panel says of ``schema``: enforced exactly, or each
    keyword the grammar would not enforce and whether a request is refused for it."""
    from models.foundation.errors import QuantDeskError
    from models.structured.constraint import constraint_for_schema
    from models.structured.schema_policy import schema_verdict

    enforced, problems = schema_verdict(schema)
    if enforced:
        return "✓ Enforced exactly: every reply will match the schema."
    listed = "\n".join(f"• {p.pointer or '/'}: {p.message}" for p in problems)
    try:
        constraint_for_schema(schema, allow_unsupported=not strict)
    except QuantDeskError:
        return f"Not enforced exactly, so a strict request is refused:\n{listed}"
    return f"Not enforced exactly; generating anyway, each reply checked against the whole schema:\n{listed}"
