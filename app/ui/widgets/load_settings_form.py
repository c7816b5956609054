"""The load settings form: the Chat panel's "offload sliders" and the Settings page's
defaults for new models — one form, so both say and store the same things the same way.

In the chat it follows a model: its GGUF header (read off the GUI thread) gives the
layer count and trained context, and the memory-fit verdict follows every move. In
defaults mode (``defaults=True``) there is no model: GPU layers read "all", "none" or a
number, the context may be "the model's own", threads "auto", and there is no verdict.
For a mixture-of-experts model (and in defaults mode, where it applies to such models
only) a slider keeps the experts of the first N layers in RAM, on the CPU, while the
rest of those layers goes to the GPU (llama.cpp's ``--n-cpu-moe``); the verdict then
also says how many of the model's parameters a token uses.

Values arrive before the ranges that fit them: a model's remembered settings are shown
at once, its header later. So the form keeps what the settings *want* (GPU layers,
context) apart from what a slider can show now, and lays the wanted value on the slider
again whenever its range changes; a slider's own range never rewrites the settings.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Optional

from PySide6.QtCore import QSignalBlocker, Qt
from PySide6.QtWidgets import (QCheckBox, QComboBox, QFormLayout, QHBoxLayout, QLabel, QLineEdit,
                               QPushButton, QSlider, QWidget)

from app.ui.widgets.fit_badge import fit_colour
from app.ui.widgets.sizes import human_size
from models.engine.settings import ALL_LAYERS, KV_CACHE_HELP, KV_CACHE_TYPES, LoadSettings

BATCH_SIZES = (64, 128, 256, 512, 1024, 2048)
CONTEXT_STEP = 256  # tokens per slider step
DEFAULT_CONTEXT = 4096  # shown for "the model's own" before a model is known
# Defaults apply to any model: the sliders reach past what most models have.
DEFAULTS_MAX_CONTEXT = 131072
DEFAULTS_MAX_LAYERS = 128


def _cpu_count() -> int:
    return max(1, os.cpu_count() or 1)


class LoadSettingsForm(QWidget):
    """GPU layers, expert layers kept on the CPU (MoE models), context, threads, batch, KV
    cache, flash attention, mmap/mlock and a draft model; with a model, a live memory-fit
    verdict.

    Args:
        defaults: The Settings page's defaults for new models (no model, no verdict, no
            draft model: a draft must share the tokenizer of the one model it serves).
    """

    def __init__(self, parent=None, defaults: bool = False) -> None:
        super().__init__(parent)
        self.defaults = defaults
        self._projector: Optional[str] = None  # the model's vision encoder, counted in the verdict
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        # Each slider has its value in words on its right, in a column of one width for
        # all of them, so the sliders start and end in line.
        self._value_width = max(self.fontMetrics().horizontalAdvance(text)
                                for text in ("CPU only", "128 of 129", "of 131,072", "model's own"))
        self.gpu_layers, self.gpu_layers_value, gpu_row = self._slider("GPU layers", "gpuLayersValue")
        self.cpu_moe, self.cpu_moe_value, cpu_moe_row = self._slider("Expert layers kept on the CPU",
                                                                     "cpuMoeValue")
        self.cpu_moe_label = QLabel("Experts on CPU")
        self.context, self.context_value, context_row = self._slider("Context length", "contextValue")
        self.context.setSingleStep(1)
        self.context.setPageStep(16)  # 4,096 tokens
        self.threads, self.threads_value, threads_row = self._slider("Threads", "threadsValue")
        self.threads.setRange(0 if defaults else 1, _cpu_count())
        self.batch = QComboBox()
        self.batch.setAccessibleName("Batch size")
        for size in BATCH_SIZES:
            self.batch.addItem(str(size), size)
        self.flash = QCheckBox("Flash attention")
        self.flash.setAccessibleName("Flash attention")
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
        self.remote = QLineEdit()
        self.remote.setAccessibleName("Remote devices")
        self.remote.setPlaceholderText("none (host:port or ssh://user@host, comma-separated)")
        self.remote.setToolTip(
            "Other computers' workers (`quantdesk worker` there) that take part of the layers; "
            "they count as GPUs for GPU layers. ssh://user@host reaches a worker through an SSH "
            "tunnel; host:port connects directly, without a password or encryption, so use it "
            "only on this computer or a network you trust. Splitting is slower than one "
            "computer: use it when the model does not fit here.")
        self.context_label = QLabel()
        self.verdict = QLabel()
        self.verdict.setObjectName("fitVerdict")
        self.verdict.setWordWrap(True)
        self.verdict.setAccessibleName("Memory fit")
        if defaults:
            self.apply_button = QPushButton("Save defaults")
            self.apply_button.setAccessibleName("Save the default load settings")
        else:
            self.apply_button = QPushButton("Apply and reload")
            self.apply_button.setAccessibleName("Apply load settings")
        form.addRow("GPU layers", gpu_row)
        form.addRow(self.cpu_moe_label, cpu_moe_row)
        self._form = form
        form.addRow(self.context_label, context_row)
        form.addRow("Threads", threads_row)
        form.addRow("Batch size", self.batch)
        form.addRow("K cache", self.kv_k)
        form.addRow("V cache", self.kv_v)
        form.addRow(self.flash)
        form.addRow(self.mmap)
        form.addRow(self.mlock)
        form.addRow("Remote devices", self.remote)
        if not defaults:
            form.addRow("Draft model", self.draft)
            form.addRow(self.verdict)
        form.addRow(self.apply_button)
        self._header = None
        self._layers = 0
        self._trained = 0  # the model's trained context (0: unknown)
        # What the settings want, kept while the sliders' ranges cannot show it yet.
        self._wanted_layers = ALL_LAYERS
        self._wanted_cpu_moe = 0  # expert layers kept on the CPU; ALL_LAYERS: every one
        self._wanted_context = DEFAULT_CONTEXT  # 0: the model's own
        self._ram: int = 0
        self._safe_kernels = False  # this computer loads without the extra buffer types
        self._vram: Optional[int] = None
        self._machine_known = False  # set_machine has said whether there is a GPU
        self.gpu_layers.valueChanged.connect(self._gpu_layers_moved)
        self.cpu_moe.valueChanged.connect(self._cpu_moe_moved)
        self.context.valueChanged.connect(self._context_moved)
        self.threads.valueChanged.connect(self._label_threads)
        self.threads.valueChanged.connect(self.update_verdict)
        for box in (self.batch, self.kv_k, self.kv_v):
            box.currentIndexChanged.connect(self.update_verdict)
        self.flash.toggled.connect(self.update_verdict)
        self.kv_v.currentTextChanged.connect(self._v_cache_chosen)
        self.flash.toggled.connect(self._flash_toggled)
        self.remote.textChanged.connect(self._show_gpu_layers)
        self.remote.textChanged.connect(self.update_verdict)
        self.set_settings(LoadSettings())

    def _slider(self, name: str, value_name: str) -> tuple[QSlider, QLabel, QHBoxLayout]:
        """A slider and its value label (fixed width, shared by every slider row)."""
        slider = QSlider(Qt.Orientation.Horizontal)
        slider.setAccessibleName(name)
        value = QLabel()
        value.setObjectName(value_name)
        value.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        value.setFixedWidth(self._value_width)
        row = QHBoxLayout()
        row.addWidget(slider, 1)
        row.addWidget(value)
        return slider, value, row

    # -- what the form is given ------------------------------------------------------

    def set_machine(self, header, ram_available: int, vram_available: Optional[int],
                    safe_kernels: bool = False) -> None:
        """The chosen model's GGUF header (``None`` in defaults mode), this machine's free
        memory (:func:`models.memory_fit.free_memory`) and whether it loads with the safe
        CPU kernels (:func:`models.engine.fallback.needs_safe_kernels`: no repacked weight
        copies, whatever the settings say)."""
        self._header, self._ram, self._vram = header, ram_available, vram_available
        self._safe_kernels = safe_kernels
        self._machine_known = True
        self._layers = int(header.arch_value("block_count", 0)) if header is not None else 0
        self._trained = int(header.arch_value("context_length", 0) or 0) if header is not None else 0
        self._show_context()
        self._show_gpu_layers()
        self._show_cpu_moe()
        self.update_verdict()

    def set_settings(self, settings: LoadSettings) -> None:
        """Show ``settings``: in full at once, whatever the ranges the model's header
        (which may come later) will set."""
        self._wanted_layers = settings.gpu_layers
        self._projector = settings.mmproj  # not shown, but its bytes count in the verdict
        self._wanted_context = settings.context_length or 0
        self._wanted_cpu_moe = settings.cpu_moe_layers
        self._show_gpu_layers()
        self._show_cpu_moe()
        self._show_context()
        with QSignalBlocker(self.threads):
            self.threads.setValue(settings.threads or (0 if self.defaults else max(1, _cpu_count() // 2)))
        self._label_threads()
        self.batch.setCurrentIndex(max(0, self.batch.findData(settings.batch_size)))
        self.kv_k.setCurrentText(settings.kv_cache_type_k)
        self.kv_v.setCurrentText(settings.kv_cache_type_v)
        self.flash.setChecked(settings.flash_attention)
        self.mmap.setChecked(settings.use_mmap)
        self.mlock.setChecked(settings.use_mlock)
        self.draft.setText(settings.draft_model or "")
        with QSignalBlocker(self.remote):
            self.remote.setText(", ".join(settings.remote_devices))
        self._show_gpu_layers()
        self.update_verdict()

    # -- GPU layers ------------------------------------------------------------------

    def _gpu_layers_top(self) -> int:
        """The slider's top ("all"): llama.cpp's layer count with the output layer."""
        if self.defaults:
            return DEFAULTS_MAX_LAYERS + 1
        return self._layers + 1 if self._header is not None else 0

    def _show_gpu_layers(self) -> None:
        """Put the wanted GPU layers on the slider, within the range known now.

        "all" stays "all" once the model's layer count is known, not layer 1 of a model
        of 0 layers; a number is shown within the model's layers."""
        known = self.defaults or self._header is not None
        gpu = self._gpu_usable()
        top = self._gpu_layers_top()
        wanted = top if self._wanted_layers == ALL_LAYERS else min(self._wanted_layers, top)
        with QSignalBlocker(self.gpu_layers):  # a programmatic move is not a person's choice
            self.gpu_layers.setRange(0, top)
            self.gpu_layers.setValue(wanted if gpu else 0)
        self.gpu_layers.setEnabled(known and gpu)
        if self.defaults and gpu:
            tip = ("Layers to put on the GPU for a model that has no settings of its own: all, "
                   "none (CPU only), or a number of layers.")
        elif not known:
            tip = "Choose a model first: how many of its layers can go to the GPU depends on the model."
        elif not gpu:
            tip = "No GPU was found by this llama.cpp build: everything runs on the CPU."
        elif self._remote_entries():
            tip = (f"Layers of the model to put on the GPUs and the remote devices (all: {top}, "
                   "the output layer included, which goes first); the rest stay on this CPU.")
        else:
            tip = f"Layers of the model to put on the GPU (all: {top}, the output layer included)."
        self.gpu_layers.setToolTip(tip)
        self.gpu_layers_value.setToolTip(tip)
        self._label_gpu_layers()

    def _gpu_usable(self) -> bool:
        """Whether GPU layers can be chosen: there is a GPU; in defaults mode also while
        the machine is not known yet (once it is known to have none, a number of layers
        would be refused at every load)."""
        return bool(self._vram) or bool(self._remote_entries()) or \
            (self.defaults and not self._machine_known)

    def _remote_entries(self) -> tuple[str, ...]:
        """The remote devices as typed (their form is checked when the model loads)."""
        return tuple(e.strip() for e in self.remote.text().replace("\n", ",").split(",")
                     if e.strip())

    def _label_gpu_layers(self) -> None:
        """The slider's value in words beside it (also its accessible description)."""
        value, top = self.gpu_layers.value(), self.gpu_layers.maximum()
        if self.defaults and self._gpu_usable():
            text = "all" if value == top else "none" if value == 0 else str(value)
        elif self._header is None and not self.defaults:
            text = "—"
        elif not self._gpu_usable():
            text = "CPU only"
        else:
            text = "all" if value == top else f"{value} of {top}"
        self.gpu_layers_value.setText(text)
        self.gpu_layers.setAccessibleDescription(text)

    def _gpu_layers_moved(self, value: int) -> None:
        """A person moved the slider: that is the wanted number from now on."""
        self._wanted_layers = ALL_LAYERS if value == self.gpu_layers.maximum() else value
        self._label_gpu_layers()
        self.update_verdict()

    def _gpu_layers_setting(self) -> int:
        """The GPU layers to load with: the wanted number while the model's layers are
        unknown, 0 without a GPU (as on screen), else the slider's (its top is "all");
        in defaults mode the slider's."""
        if self._header is None and not self.defaults:
            return self._wanted_layers
        if not self._gpu_usable():  # "all" is 0 on such a machine, and stays "all" elsewhere
            return ALL_LAYERS if self.defaults and self._wanted_layers == ALL_LAYERS else 0
        layers = self.gpu_layers.value()
        return ALL_LAYERS if layers == self.gpu_layers.maximum() else layers

    # -- expert layers kept on the CPU (mixture-of-experts models) ------------------------

    def _is_moe(self) -> bool:
        return self._header is not None and self._header.expert_count > 0

    def _show_cpu_moe(self) -> None:
        """The experts slider: for a MoE model (0 … its blocks, the top is "all"), and in
        defaults mode (0 … 128, for whichever MoE model comes); hidden for dense models."""
        visible = self.defaults or self._is_moe()
        self._form.setRowVisible(self.cpu_moe_label, visible)
        top = DEFAULTS_MAX_LAYERS if self.defaults else self._layers
        wanted = top if self._wanted_cpu_moe == ALL_LAYERS else min(max(self._wanted_cpu_moe, 0), top)
        with QSignalBlocker(self.cpu_moe):
            self.cpu_moe.setRange(0, top)
            self.cpu_moe.setValue(wanted)
        self.cpu_moe.setToolTip(
            "Mixture-of-experts models: the layers (from the first) whose experts stay in RAM and "
            "run on the CPU while the rest of each layer goes to the GPU. Experts are most of such "
            "a model but each token reads only a few, so a big MoE model runs with a small GPU"
            + (" (dense models ignore this)." if self.defaults else "."))
        self._label_cpu_moe()

    def _label_cpu_moe(self) -> None:
        value, top = self.cpu_moe.value(), self.cpu_moe.maximum()
        text = "none" if value == 0 else "all" if value == top else (
            str(value) if self.defaults else f"{value} of {top}")
        self.cpu_moe_value.setText(text)
        self.cpu_moe.setAccessibleDescription(text)

    def _cpu_moe_moved(self, value: int) -> None:
        """A person moved the slider: that is the wanted number from now on."""
        self._wanted_cpu_moe = ALL_LAYERS if value and value == self.cpu_moe.maximum() else value
        self._label_cpu_moe()
        self.update_verdict()

    # -- context ----------------------------------------------------------------------

    def _show_context(self) -> None:
        """Put the wanted context on the slider: within the model's trained length once
        that is known; before, the range grows to hold the wanted value (a model's
        remembered 8,192 is not cut to a default range while its header is read)."""
        wanted = self._wanted_context
        if self.defaults:
            low, top = 0, DEFAULTS_MAX_CONTEXT // CONTEXT_STEP  # 0: the model's own
        elif self._trained:
            low, top = 1, max(1, self._trained // CONTEXT_STEP)
        else:
            low, top = 1, max(DEFAULT_CONTEXT, wanted) // CONTEXT_STEP
        own = 0 if self.defaults else (self._trained or DEFAULT_CONTEXT) // CONTEXT_STEP
        shown = max(1, round(wanted / CONTEXT_STEP)) if wanted else own
        with QSignalBlocker(self.context):
            self.context.setRange(low, top)
            self.context.setValue(min(max(shown, low), top))
        if self.defaults:
            tip = "Tokens a conversation can hold, for models without settings of their own; at the left end, each model's own."
        elif self._trained:
            tip = f"Tokens the conversation can hold; this model was trained for {self._trained:,}."
        else:
            tip = "Tokens the conversation can hold (up to what the model was trained for)."
        self.context.setToolTip(tip)
        self._label_context()

    def _label_context(self) -> None:
        tokens = self._context_setting()
        own = tokens == 0
        if own and self._trained:
            tokens = self._trained
        self.context_label.setText("Context (model's own)" if own and not tokens else f"Context ({tokens:,})")
        text = "model's own" if own else (f"of {self._trained:,}" if self._trained else "")
        self.context_value.setText(text)
        self.context.setAccessibleDescription(self.context_label.text())

    def _context_moved(self, value: int) -> None:
        """A person moved the slider: that is the wanted context from now on."""
        self._wanted_context = value * CONTEXT_STEP
        self._label_context()
        self.update_verdict()

    def _context_setting(self) -> int:
        """The context to load with: 0 (the model's own) while that is wanted, the slider's
        once the model is known, else the wanted number."""
        if not self._wanted_context:
            return 0
        if self._trained:
            return self.context.value() * CONTEXT_STEP
        if self.defaults:
            return min(self._wanted_context, DEFAULTS_MAX_CONTEXT)
        return self._wanted_context

    # -- threads ----------------------------------------------------------------------

    def _label_threads(self) -> None:
        value = self.threads.value()
        text = "auto" if value == 0 else str(value)
        self.threads_value.setText(text)
        self.threads.setAccessibleDescription(text)
        self.threads.setToolTip("CPU threads that generate tokens" +
                                ("; auto: half of this computer's." if self.defaults else "."))

    # -- the rule between V cache and flash attention ---------------------------------

    def _v_cache_chosen(self, kv_type: str) -> None:
        """A quantized V cache needs flash attention (llama.cpp reads it only in that
        kernel): choosing one ticks it, rather than a load refused later."""
        if kv_type != "f16" and not self.flash.isChecked():
            self.flash.setChecked(True)

    def _flash_toggled(self, on: bool) -> None:
        """Flash attention off: a quantized V cache cannot stay, so V goes back to f16."""
        if not on and self.kv_v.currentText() != "f16":
            self.kv_v.setCurrentText("f16")

    # -- what the form gives ----------------------------------------------------------

    def settings(self, base: Optional[LoadSettings] = None) -> LoadSettings:
        """The settings as chosen (fields the form does not show come from ``base``)."""
        base = base or LoadSettings()
        batch = self.batch.currentData()
        return replace(base,
                       gpu_layers=self._gpu_layers_setting(),
                       context_length=self._context_setting(),
                       threads=self.threads.value() or None, batch_size=batch,
                       micro_batch_size=min(batch, 512),
                       kv_cache_type_k=self.kv_k.currentText(),
                       kv_cache_type_v=self.kv_v.currentText(),
                       flash_attention=self.flash.isChecked(), use_mmap=self.mmap.isChecked(),
                       use_mlock=self.mlock.isChecked(),
                       cpu_moe_layers=self._wanted_cpu_moe,
                       remote_devices=self._remote_entries(),
                       draft_model=base.draft_model if self.defaults else (self.draft.text().strip() or None))

    def _remote_share(self, prediction, s: LoadSettings, gpu: int):
        """With remote devices: the prediction for this computer only, and a sentence with
        each device's share (:func:`models.memory_fit.device_shares`; the split as set, or
        equal shares standing for "by free memory", which the workers tell at load)."""
        from models.memory_fit import FitSettings, device_shares

        names = list(s.remote_devices) + (["this computer's GPU"] if self._vram else [])
        split = list(s.device_split) or [1.0] * len(names)
        split += [1.0] * (len(names) - len(split))
        shares = device_shares(self._header, FitSettings(
            n_ctx=s.context_length or self._trained or DEFAULT_CONTEXT, kv_type=s.kv_cache_type_k,
            n_gpu_layers=gpu), list(zip(names, split[:len(names)])))
        parts = "; ".join(f"{d.name}: {d.layers} layers, {human_size(d.total)}" for d in shares)
        basis = "as split" if s.device_split else "in equal shares here; by free memory when loading"
        if not self._vram:  # the offloaded layers are the workers': not this computer's RAM
            prediction = replace(prediction, weights_gpu=0, kv_gpu=0, compute_gpu=0)
        return prediction, f"<br>Layers by device ({basis}): {parts}."

    def update_verdict(self) -> None:
        """Predict RAM/VRAM for the settings on screen (arithmetic on the cached header)."""
        self._label_context()
        if self.defaults:
            return
        if self._header is None:
            self.verdict.setText("Choose a model to see whether it fits.")
            return
        from models.memory_fit import FitSettings, judge_fit, predict_memory

        s = self.settings()
        gpu = 0 if not self._gpu_usable() else (self._layers + 1 if s.gpu_layers == ALL_LAYERS
                                                else s.gpu_layers)
        try:
            prediction = predict_memory(self._header, FitSettings(
                n_ctx=s.context_length or self._trained or DEFAULT_CONTEXT, kv_type=s.kv_cache_type_k,
                n_gpu_layers=gpu, n_batch=s.batch_size, n_ubatch=s.micro_batch_size,
                flash_attn=s.flash_attention, cpu_moe_layers=s.cpu_moe_layers if self._is_moe() else 0,
                use_mmap=s.use_mmap, use_extra_bufts=s.use_extra_bufts and not self._safe_kernels,
                projector_bytes=_file_size(self._projector)))
        except Exception as exc:  # a header memory_fit cannot read: say so, keep going
            self.verdict.setText(f"Memory use cannot be predicted for this model ({exc}).")
            return
        remote_note = ""
        if s.remote_devices:
            prediction, remote_note = self._remote_share(prediction, s, gpu)
        verdict = judge_fit(prediction, self._ram, self._vram)
        vram = f", VRAM {human_size(prediction.vram)}" if prediction.vram else ""
        params = f" {prediction.parameters_text} parameters." if self._is_moe() else ""
        self.verdict.setText(f'<b style="color:{fit_colour(verdict.verdict)}">{verdict.verdict.capitalize()}</b>: '
                             f"RAM {human_size(prediction.ram)}{vram} — {verdict.reason}.{params}"
                             f"{remote_note}")
        self.verdict.setProperty("verdict", verdict.verdict)


def _file_size(path) -> int:
    """The vision encoder's bytes (0 without one, or when it cannot be read)."""
    try:
        return os.path.getsize(path) if path else 0
    except OSError:
        return 0
