"""The chat's side panel: the model picker and load status, then folding sections (superqt's
``QCollapsible``) for load settings, sampling, system prompt and JSON mode
(:mod:`app.ui.widgets.load_settings_form`, :mod:`app.ui.chat.settings_forms`). Loading,
replying and storing are the page's business.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from PySide6.QtCore import QAbstractListModel, QModelIndex, QSize, Qt, QTimer
from shiboken6 import isValid
from PySide6.QtWidgets import (QComboBox, QHBoxLayout, QLabel, QPlainTextEdit, QProgressBar, QPushButton,
                               QScrollArea, QVBoxLayout, QWidget)

from app.ui.widgets.quality_text import quality_text, quality_tooltip
from app.ui.widgets.sizes import human_size

PATH_ROLE = Qt.ItemDataRole.UserRole + 1


class ModelListModel(QAbstractListModel):
    """The models to choose from: the Library's GGUF files plus any file opened directly."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._rows: list[tuple[str, str, str]] = []  # path, label, tooltip
        self.library_known = False  # the Library's list has arrived (it is read off the GUI thread)

    def set_library(self, models: list, quality: Optional[dict] = None) -> None:
        """Rows from :class:`~models.library.LibraryModel` entries (GGUF only); a file with a
        stored quality report (``quality``: path → :class:`~models.library.QualityRecord`)
        says its KLD in the label and the report in the tooltip."""
        rows = []
        for m in models:
            if m.kind != "gguf" or m.error:
                continue
            template = "chat template" if m.chat_template else "no chat template"
            ctx = f"{m.context_length:,} ctx" if m.context_length else "ctx ?"
            label = f"{m.name} · {m.quant or '?'} · {human_size(m.size)} · {ctx} · {template}"
            tip = m.path
            record = (quality or {}).get(m.path)
            if record is not None:
                label += f" · {quality_text(record)}"
                tip += "\n" + quality_tooltip(record)
            rows.append((m.path, label, tip))
        extra = [r for r in self._rows if r[0] not in {p for p, _, _ in rows}]
        self.beginResetModel()
        self._rows = rows + extra
        self.library_known = True
        self.endResetModel()

    def paths(self) -> list[str]:
        """Every model file listed (the Library's and those opened directly)."""
        return [path for path, _, _ in self._rows]

    def add_path(self, path: Path) -> int:
        """Make sure ``path`` is a row; return its row."""
        key = str(Path(path))
        for row, (p, _, _) in enumerate(self._rows):
            if p == key:
                return row
        self.beginInsertRows(QModelIndex(), len(self._rows), len(self._rows))
        self._rows.append((key, Path(path).name, key))
        self.endInsertRows()
        return len(self._rows) - 1

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802 - Qt
        return 0 if parent.isValid() else len(self._rows)

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        path, label, tip = self._rows[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return label
        if role == Qt.ItemDataRole.ToolTipRole:
            return tip
        if role == PATH_ROLE:
            return path
        return None


class SidePanel(QScrollArea):
    """Model picker and load status on top; folding sections below."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("chatSidePanel")
        self.setWidgetResizable(True)
        # Never scrolled sideways: the panel is as wide as its forms need (minimumSizeHint),
        # so a narrow window narrows the transcript instead of cutting the forms off.
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        body = QWidget()
        layout = QVBoxLayout(body)
        layout.setContentsMargins(8, 8, 8, 8)
        self.models = ModelListModel(self)
        self.model_picker = QComboBox()
        self.model_picker.setAccessibleName("Model")
        self.model_picker.setModel(self.models)
        self.model_picker.setPlaceholderText("Choose a model…")
        self.model_picker.setMinimumContentsLength(16)
        self.model_picker.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.progress = QProgressBar()  # busy until llama.cpp reports how far it has read
        self.progress.setAccessibleName("Loading")
        self.progress.hide()
        self.status = QLabel("No model loaded.")
        self.status.setObjectName("loadStatus")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(QLabel("<b>Model</b>"))
        layout.addWidget(self.model_picker)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        self.details = None  # the load's buffer-by-buffer detail, folded (made on the first load)
        # "… is now in the Library. [Undo]": shown after a model opened in the window joins it.
        self.library_note = QLabel()
        self.library_note.setObjectName("libraryNote")
        self.library_note.setWordWrap(True)
        self.library_undo = QPushButton("Undo")
        self.library_undo.setAccessibleName("Undo adding to the Library")
        note_row = QHBoxLayout()
        note_row.setContentsMargins(0, 0, 0, 0)
        note_row.addWidget(self.library_note, 1)
        note_row.addWidget(self.library_undo, 0, Qt.AlignmentFlag.AlignTop)
        self.library_row = QWidget()
        self.library_row.setLayout(note_row)
        self.library_row.hide()
        layout.addWidget(self.library_row)
        self._layout = layout
        self.sections = {}
        self.setWidget(body)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt
        """As wide as the forms' least width and the vertical scroll bar (see __init__)."""
        hint = super().minimumSizeHint()
        body = self.widget()
        if body is None:
            return hint
        width = body.minimumSizeHint().width() + self.verticalScrollBar().sizeHint().width() \
            + 2 * self.frameWidth()
        return QSize(max(hint.width(), width), hint.height())

    def build_sections(self) -> None:
        """Build the settings sections (once; after the window is on screen)."""
        if self.sections or not isValid(self._layout):  # built, or the window is going away
            return
        from superqt import QCollapsible

        from app.ui.chat.settings_forms import JsonModeForm, SamplingForm
        from app.ui.widgets.load_settings_form import LoadSettingsForm

        layout = self._layout
        self.load_form = LoadSettingsForm()
        self.sampling = SamplingForm()
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setAccessibleName("System prompt")
        self.system_prompt.setPlaceholderText("Optional: how the assistant should behave")
        self.system_prompt.setMaximumHeight(110)
        self.json_mode = JsonModeForm()
        for title, widget, expanded in (("Load settings", self.load_form, True),
                                        ("Sampling", self.sampling, False),
                                        ("System prompt", self.system_prompt, False),
                                        ("Structured output", self.json_mode, False)):
            section = QCollapsible(title, expandedIcon="▾", collapsedIcon="▸")
            section.addWidget(widget)
            if expanded:
                section.expand(animate=False)
            else:
                section.collapse(animate=False)
            self.sections[title] = section
            layout.addWidget(section)
        layout.addStretch(1)

    def changeEvent(self, event) -> None:  # noqa: N802 - Qt
        """Redraw the sections' arrows in the new theme's text colour (superqt paints
        string icons once, with the palette of the moment)."""
        from PySide6.QtCore import QEvent

        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            QTimer.singleShot(0, self, self._repaint_arrows)  # after the children's palettes

    def _repaint_arrows(self) -> None:
        for section in [*self.sections.values(), *([self.details] if self.details else [])]:
            section.setExpandedIcon("▾")
            section.setCollapsedIcon("▸")

    def set_status(self, text: str, details: str = "") -> None:
        """The load status in plain words; ``details`` (lines) go in a folded "Details"
        section under it, hidden when there are none."""
        self.status.setText(text)
        if details and self.details is None:
            from superqt import QCollapsible

            self.details = QCollapsible("Details", expandedIcon="▾", collapsedIcon="▸")
            self.details.setObjectName("loadDetails")
            self.details.setAccessibleName("Load details")
            self.details_text = QLabel()
            self.details_text.setObjectName("loadDetailsText")
            self.details_text.setWordWrap(True)
            self.details_text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            self.details.addWidget(self.details_text)
            self.details.collapse(animate=False)
            self._layout.insertWidget(self._layout.indexOf(self.status) + 1, self.details)
        if self.details is not None:
            self.details_text.setText(details)
            self.details.setVisible(bool(details))

    def show_library_note(self, text: str = "", undo: bool = False) -> None:
        """A sentence about the Library under the load status (with the Undo button when
        ``undo``); nothing when ``text`` is empty."""
        self.library_note.setText(text)
        self.library_undo.setVisible(undo)
        self.library_row.setVisible(bool(text))

    def current_model(self) -> Optional[Path]:
        path = self.model_picker.currentData(PATH_ROLE)
        return Path(path) if path else None

    def show_model(self, path: Path) -> None:
        """Make ``path`` the picker's choice (added as a row when the Library lacks it)."""
        self.model_picker.setCurrentIndex(self.models.add_path(Path(path)))

    def set_library(self, models: list, quality: Optional[dict] = None) -> None:
        """New Library rows (and their stored quality reports); the picker keeps showing the
        model it showed (a reset of the list would otherwise jump it to the first row while
        another model is loaded)."""
        shown = self.current_model()
        self.models.set_library(models, quality)
        if shown is not None:
            self.show_model(shown)
