"""The load settings, sampling and JSON-mode forms of the chat's side panel.

They only collect choices and show their consequences at once — the memory-fit verdict
while a slider moves, schema errors while typing. Imported when the panel's sections are
first built (they pull in the engine package and numpy), not at start-up.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from typing import Optional

from PySide6.QtCore import QSignalBlocker, Qt, QTimer, Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QHBoxLayout,
                               QLabel, QLineEdit, QPlainTextEdit, QPushButton, QSlider, QSpinBox,
                               QVBoxLayout, QWidget)
from superqt import QLabeledSlider

from app.core import model_settings
from app.ui.chat.side_panel import human_size
from models.engine.options import ChatOptions
from models.engine.settings import ALL_LAYERS, KV_CACHE_HELP, KV_CACHE_TYPES, LoadSettings

BATCH_SIZES = (64, 128, 256, 512, 1024, 2048)
_VERDICT_COLOURS = {"fits": "ok", "tight": "tight", "won't fit": "bad"}  # theme colour names


class LoadSettingsForm(QWidget):
    """Offload sliders and the other load settings, with a live memory-fit verdict."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        # A plain slider and the value in words beside it: "all", "12 of 31", "CPU only",
        # and "—" before a model is chosen (its layer count is read from its file).
        self.gpu_layers = QSlider(Qt.Orientation.Horizontal)
        self.gpu_layers.setAccessibleName("GPU layers")
        self.gpu_layers_value = QLabel()
        self.gpu_layers_value.setObjectName("gpuLayersValue")
        self.gpu_layers_value.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.gpu_layers_value.setMinimumWidth(self.gpu_layers_value.fontMetrics().horizontalAdvance("CPU only "))
        gpu_row = QHBoxLayout()
        gpu_row.addWidget(self.gpu_layers, 1)
        gpu_row.addWidget(self.gpu_layers_value)
        self.context = QSlider(Qt.Orientation.Horizontal)  # in steps of 256; the label says tokens
        self.context.setAccessibleName("Context length")
        self.context.setRange(1, 16)
        self.context.setSingleStep(1)
        self.threads = QLabeledSlider(Qt.Orientation.Horizontal)
        self.threads.setAccessibleName("Threads")
        self.threads.setRange(1, max(1, os.cpu_count() or 1))
        self.batch = QComboBox()
        self.batch.setAccessibleName("Batch size")
        for size in BATCH_SIZES:
            self.batch.addItem(str(size), size)
        self.flash = QCheckBox("Flash attention")
        self.kv_k, self.kv_v = QComboBox(), QComboBox()
        for box, name in ((self.kv_k, "K cache type"), (self.kv_v, "V cache type")):
            box.addItems(list(KV_CACHE_TYPES))
            box.setAccessibleName(name)
            box.setToolTip(KV_CACHE_HELP)
        self.mmap = QCheckBox("Memory-map the file (mmap)")
        self.mlock = QCheckBox("Lock in RAM (mlock)")
        self.draft = QLineEdit()
        self.draft.setAccessibleName("Draft model")
        self.draft.setPlaceholderText("none (path of a small GGUF of the same family)")
        self.context_label = QLabel()
        self.verdict = QLabel()
        self.verdict.setObjectName("fitVerdict")
        self.verdict.setWordWrap(True)
        self.verdict.setAccessibleName("Memory fit")
        self.apply_button = QPushButton("Apply and reload")
        self.apply_button.setAccessibleName("Apply load settings")
        form.addRow("GPU layers", gpu_row)
        form.addRow(self.context_label, self.context)
        form.addRow("Threads", self.threads)
        form.addRow("Batch size", self.batch)
        form.addRow("K cache", self.kv_k)
        form.addRow("V cache", self.kv_v)
        form.addRow(self.flash)
        form.addRow(self.mmap)
        form.addRow(self.mlock)
        form.addRow("Draft model", self.draft)
        form.addRow(self.verdict)
        form.addRow(self.apply_button)
        self._header = None
        self._layers = 0
        self._wanted_layers = ALL_LAYERS  # the settings' choice, kept until the model's layers are known
        self._ram: int = 0
        self._vram: Optional[int] = None
        self.gpu_layers.valueChanged.connect(self._gpu_layers_moved)
        for slider in (self.context, self.threads):
            slider.valueChanged.connect(self.update_verdict)
        for box in (self.batch, self.kv_k, self.kv_v):
            box.currentIndexChanged.connect(self.update_verdict)
        self.flash.toggled.connect(self.update_verdict)
        self.set_settings(LoadSettings())

    def set_machine(self, header, ram_available: int, vram_available: Optional[int]) -> None:
        """The chosen model's GGUF header and this machine's free memory."""
        self._header, self._ram, self._vram = header, ram_available, vram_available
        self._layers = int(header.arch_value("block_count", 0)) if header is not None else 0
        trained = int(header.arch_value("context_length", 4096) or 4096) if header is not None else 4096
        self.context.setRange(1, max(1, trained // 256))
        self._show_gpu_layers()
        self.update_verdict()

    def _show_gpu_layers(self) -> None:
        """Put the wanted GPU layers on the slider, for the model's layer count.

        The load settings arrive before the model's header (that is read off the GUI
        thread): "all" must stay "all" once the count is known, not become layer 1 of
        a model of 0 layers. The slider's range is 0..layers+1, llama.cpp's count with
        the output layer; the top is "all"."""
        known, gpu = self._header is not None, bool(self._vram)
        top = self._layers + 1 if known else 0
        wanted = top if self._wanted_layers == ALL_LAYERS else min(self._wanted_layers, top)
        with QSignalBlocker(self.gpu_layers):  # a programmatic move is not a person's choice
            self.gpu_layers.setRange(0, top)
            self.gpu_layers.setValue(wanted if gpu else 0)
        self.gpu_layers.setEnabled(known and gpu)
        if not known:
            tip = "Choose a model first: how many of its layers can go to the GPU depends on the model."
        elif not gpu:
            tip = "No GPU was found by this llama.cpp build: everything runs on the CPU."
        else:
            tip = f"Layers of the model to put on the GPU (all: {top}, the output layer included)."
        self.gpu_layers.setToolTip(tip)
        self.gpu_layers_value.setToolTip(tip)
        self._label_gpu_layers()

    def _label_gpu_layers(self) -> None:
        """The slider's value in words beside it (also its accessible description)."""
        value, top = self.gpu_layers.value(), self.gpu_layers.maximum()
        if self._header is None:
            text = "—"
        elif not self._vram:
            text = "CPU only"
        else:
            text = "all" if value == top else f"{value} of {top}"
        self.gpu_layers_value.setText(text)
        self.gpu_layers.setAccessibleDescription(text)

    def _gpu_layers_moved(self, value: int) -> None:
        """A person moved the slider: that is the wanted number from now on."""
        self._wanted_layers = ALL_LAYERS if value > self._layers else value
        self._label_gpu_layers()
        self.update_verdict()

    def set_settings(self, settings: LoadSettings) -> None:
        """Show ``settings`` (the GPU layers fully once the model's header is known)."""
        self._wanted_layers = settings.gpu_layers
        self._show_gpu_layers()
        self.context.setValue(max(1, (settings.context_length or 4096) // 256))
        self.threads.setValue(settings.threads or max(1, (os.cpu_count() or 2) // 2))
        self.batch.setCurrentIndex(max(0, self.batch.findData(settings.batch_size)))
        self.kv_k.setCurrentText(settings.kv_cache_type_k)
        self.kv_v.setCurrentText(settings.kv_cache_type_v)
        self.flash.setChecked(settings.flash_attention)
        self.mmap.setChecked(settings.use_mmap)
        self.mlock.setChecked(settings.use_mlock)
        self.draft.setText(settings.draft_model or "")
        self.update_verdict()

    def settings(self, base: Optional[LoadSettings] = None) -> LoadSettings:
        """The settings as chosen (fields the form does not show come from ``base``)."""
        batch = self.batch.currentData()
        return replace(base or LoadSettings(),
                       gpu_layers=self._gpu_layers_setting(),
                       context_length=self.context.value() * 256,
                       threads=self.threads.value(), batch_size=batch,
                       micro_batch_size=min(batch, 512),
                       kv_cache_type_k=self.kv_k.currentText(),
                       kv_cache_type_v=self.kv_v.currentText(),
                       flash_attention=self.flash.isChecked(), use_mmap=self.mmap.isChecked(),
                       use_mlock=self.mlock.isChecked(),
                       draft_model=self.draft.text().strip() or None)

    def _gpu_layers_setting(self) -> int:
        """The GPU layers to load with: the wanted number while the model's layers are
        unknown, 0 without a GPU (as on screen), else the slider's (its top is "all")."""
        if self._header is None:
            return self._wanted_layers
        if not self._vram:
            return 0
        layers = self.gpu_layers.value()
        return ALL_LAYERS if layers > self._layers else layers

    def update_verdict(self) -> None:
        """Predict RAM/VRAM for the settings on screen (arithmetic on the cached header)."""
        self.context_label.setText(f"Context ({self.context.value() * 256:,})")
        if self._header is None:
            self.verdict.setText("Choose a model to see whether it fits.")
            return
        from models.memory_fit import FitSettings, judge_fit, predict_memory

        s = self.settings()
        gpu = 0 if not self._vram else (self._layers + 1 if s.gpu_layers == ALL_LAYERS else s.gpu_layers)
        try:
            prediction = predict_memory(self._header, FitSettings(
                n_ctx=s.context_length, kv_type=s.kv_cache_type_k, n_gpu_layers=gpu,
                n_batch=s.batch_size, n_ubatch=s.micro_batch_size, flash_attn=s.flash_attention))
        except Exception as exc:  # a header memory_fit cannot read: say so, keep going
            self.verdict.setText(f"Memory use cannot be predicted for this model ({exc}).")
            return
        verdict = judge_fit(prediction, self._ram, self._vram)
        vram = f", VRAM {human_size(prediction.vram)}" if prediction.vram else ""
        from app.ui.theme import color

        colour = color(_VERDICT_COLOURS[verdict.verdict])
        self.verdict.setText(f'<b style="color:{colour}">{verdict.verdict.capitalize()}</b>: '
                             f"RAM {human_size(prediction.ram)}{vram} — {verdict.reason}.")
        self.verdict.setProperty("verdict", verdict.verdict)


class SamplingForm(QWidget):
    """Temperature, top-p/k, min-p, repeat penalty, seed, max tokens, stop strings, presets."""

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
        for label, mode in (("off", "off"), ("prompt lookup", "prompt_lookup"),
                            ("draft model", "draft_model")):
            self.speculative.addItem(label, mode)
        self.speculative.setToolTip("Guess several tokens and check them in one pass: the reply "
                                    "is the same, often faster. The draft model is set in the "
                                    "load settings.")
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
        form.addRow(row)
        self.reload_presets()
        self.preset.activated.connect(self._preset_chosen)
        for spin in (self.temperature, self.top_p, self.min_p, self.repeat, self.top_k, self.max_tokens):
            spin.valueChanged.connect(self.changed)
        self.seed.textChanged.connect(self.changed)
        self.stop.textChanged.connect(self.changed)
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
    """The JSON mode toggle and its schema editor, checked as the person types."""

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
        self.problems = QLabel()
        self.problems.setObjectName("schemaProblems")
        self.problems.setWordWrap(True)
        self.problems.setAccessibleName("Schema problems")
        layout.addWidget(self.enabled)
        layout.addWidget(self.schema)
        layout.addWidget(self.problems)
        self._timer = QTimer(self, singleShot=True, interval=250)  # check after typing pauses
        self._timer.timeout.connect(self.check)
        self.schema.textChanged.connect(self._timer.start)
        self.schema.textChanged.connect(self.changed)
        self.enabled.toggled.connect(self.changed)
        self.enabled.toggled.connect(lambda _: self.check())

    def output_fields(self) -> dict:
        """ChatOptions fields for the mode on screen.

        Raises:
            QuantDeskError: The schema is not JSON, or uses features the grammar cannot
                enforce (each listed) — before anything is sent.
        """
        from app.core.errors import QuantDeskError

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

        constraint_for_schema(schema)  # lists unsupported features, before sending
        return dict(response_format="json_schema", schema=schema)

    def check(self) -> bool:
        """Show the schema's problems under it; True when there are none."""
        from app.core.errors import QuantDeskError

        try:
            self.output_fields()
        except QuantDeskError as exc:
            self.problems.setText(exc.user_message)
            return False
        self.problems.setText("")
        return True
