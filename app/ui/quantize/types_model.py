"""The list of target types: one checkable row per type with its exact size and fit badge,
and the measured quality of the types already checked for this source."""

from __future__ import annotations

from typing import Optional, Sequence

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, Qt, Signal

from app.core.quantize_queue import TypeRow
from app.ui.widgets.fit_badge import fit_icon, fit_word

TYPE_NAME_ROLE = Qt.ItemDataRole.UserRole + 1


class TypesModel(QAbstractListModel):
    """Rows of :class:`~app.core.quantize_queue.TypeRow`, each with a real check box.

    The display text starts with the type name (``"Q4_K_M 4.89 bpw 81.23 MiB — fits"``), so
    assistive tools and tests find a type by its name; the exact byte count is in the
    tooltip. Checked names survive a re-plan (an option changed): :meth:`set_rows` keeps them.
    A type whose output was measured (:meth:`set_quality`) says its mean KLD and same-top
    share, so a person choosing a type sees what it cost.
    """

    checked_changed = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.rows: list[TypeRow] = []
        self._checked: set[str] = set()
        self._quality: dict[str, list] = {}  # type name → QualityRow of each measured file
        self._matrix_given = False  # the job will have an importance matrix (made or a file)

    def set_rows(self, rows: Sequence[TypeRow]) -> None:
        self.beginResetModel()
        self.rows = list(rows)
        self._checked &= {r.name for r in rows}
        self.endResetModel()
        self.checked_changed.emit()

    def set_matrix_given(self, given: bool) -> None:
        """Whether the job will have an importance matrix (made first, or a chosen file):
        then a type that needs one says it will use it instead of asking for one."""
        if given != self._matrix_given:
            self._matrix_given = given
            if self.rows:
                self.dataChanged.emit(self.index(0), self.index(len(self.rows) - 1))

    def set_quality(self, rows: Sequence) -> None:
        """Show the measured quality of these :class:`~app.core.quality_checks.QualityRow` rows
        beside their types (the source's, replacing earlier ones)."""
        self._quality = {}
        for row in rows:
            self._quality.setdefault(row.type_name, []).append(row)
        if self.rows:
            self.dataChanged.emit(self.index(0), self.index(len(self.rows) - 1))

    def quality_text(self, name: str) -> str:
        """``"KLD 0.0475, 0.0321 with imatrix"`` for a measured type (each file of it
        measured, without an imatrix first); ``""`` for one not measured."""
        rows = sorted(self._quality.get(name, []), key=lambda r: bool(r.imatrix))
        if not rows:
            return ""
        return "KLD " + ", ".join(f"{r.mean_kld:.4f}" + (" with imatrix" if r.imatrix else "") for r in rows)

    def quality_tooltip(self, name: str) -> str:
        """Each measured file of type ``name``: KLD, same top token, perplexity."""
        return "\n".join(f"Measured {r.path.name}: mean KLD {r.mean_kld:.5f}, same top token "
                         f"{r.same_top_percent:.2f} %, PPL {r.ppl:.3f} ({r.delta_ppl_percent:+.2f} %)"
                         for r in self._quality.get(name, []))

    def checked(self) -> list[str]:
        """Checked type names, in list order."""
        return [r.name for r in self.rows if r.name in self._checked]

    def set_checked(self, name: str, on: bool = True) -> None:
        for i, r in enumerate(self.rows):
            if r.name == name:
                self.setData(self.index(i), Qt.CheckState.Checked if on else Qt.CheckState.Unchecked,
                             Qt.ItemDataRole.CheckStateRole)

    def row_named(self, name: str) -> Optional[TypeRow]:
        return next((r for r in self.rows if r.name == name), None)

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.rows)

    def text_of(self, row: TypeRow) -> str:
        text = f"{row.text} — {fit_word(row.fit)}"
        if row.needs_imatrix:
            text += (" (uses the importance matrix)" if self._matrix_given
                     else " (needs an importance matrix)")
        quality = self.quality_text(row.name)
        if quality:
            text += f" · {quality}"
        return text

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        row = self.rows[index.row()]
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.AccessibleTextRole):
            return self.text_of(row)
        if role == Qt.ItemDataRole.CheckStateRole:
            return Qt.CheckState.Checked if row.name in self._checked else Qt.CheckState.Unchecked
        if role == Qt.ItemDataRole.DecorationRole:
            return fit_icon(row.fit)
        if role == Qt.ItemDataRole.ToolTipRole:
            measured = self.quality_tooltip(row.name)
            return (f"{row.name}: exactly {row.file_size:,} bytes, {row.bits_per_weight:.3f} bits per weight.\n"
                    f"Memory at the default load settings: {fit_word(row.fit)} ({row.fit_reason})."
                    + (f"\n{measured}" if measured else ""))
        if role == TYPE_NAME_ROLE:
            return row.name
        return None

    def setData(self, index: QModelIndex | QPersistentModelIndex, value, role: int = Qt.ItemDataRole.EditRole) -> bool:
        if not index.isValid() or role != Qt.ItemDataRole.CheckStateRole:
            return False
        name = self.rows[index.row()].name
        state = value if isinstance(value, Qt.CheckState) else Qt.CheckState(value)
        if state == Qt.CheckState.Checked:
            self._checked.add(name)
        else:
            self._checked.discard(name)
        self.dataChanged.emit(index, index, [Qt.ItemDataRole.CheckStateRole])
        self.checked_changed.emit()
        return True

    def flags(self, index: QModelIndex | QPersistentModelIndex) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        return Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable | Qt.ItemFlag.ItemIsUserCheckable
