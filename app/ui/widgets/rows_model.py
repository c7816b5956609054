"""One table model for every list of plain rows: Library models, Hub results, downloads.

A :class:`RowsTableModel` holds a Python list of rows (dataclasses from the core) and a
list of :class:`Column` (header, how to show a row, how to sort it). Views sort and filter
it through a :class:`QSortFilterProxyModel` using :data:`SORT_ROLE`, so sorting by size
sorts numbers, not their text. No widget per row: hundreds of rows cost one paint each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt

SORT_ROLE = Qt.ItemDataRole.UserRole + 1
ROW_ROLE = Qt.ItemDataRole.UserRole + 2


@dataclass(frozen=True)
class Column:
    """A column: its header, the text of a row, and optionally a sort key and tooltip."""

    header: str
    text: Callable[[Any], str]
    sort: Optional[Callable[[Any], Any]] = None
    tooltip: Optional[Callable[[Any], str]] = None
    align_right: bool = False
    decoration: Optional[Callable[[Any], Any]] = None


class RowsTableModel(QAbstractTableModel):
    """A table over ``rows`` (any objects) shown through ``columns``."""

    def __init__(self, columns: Sequence[Column], parent=None) -> None:
        super().__init__(parent)
        self.columns = list(columns)
        self.rows: list[Any] = []

    def set_rows(self, rows: Sequence[Any]) -> None:
        """Replace every row (one reset: cheap for a view, even with hundreds of rows)."""
        self.beginResetModel()
        self.rows = list(rows)
        self.endResetModel()

    def update_row(self, row: Any) -> None:
        """Repaint ``row`` (the same object, changed in place), or append it if new."""
        for i, r in enumerate(self.rows):
            if r is row:
                self.dataChanged.emit(self.index(i, 0), self.index(i, len(self.columns) - 1))
                return
        self.beginInsertRows(QModelIndex(), len(self.rows), len(self.rows))
        self.rows.append(row)
        self.endInsertRows()

    def remove_row(self, row: Any) -> None:
        for i, r in enumerate(self.rows):
            if r is row:
                self.beginRemoveRows(QModelIndex(), i, i)
                del self.rows[i]
                self.endRemoveRows()
                return

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.columns)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole):
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return self.columns[section].header
        return None

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        row, column = self.rows[index.row()], self.columns[index.column()]
        if role == Qt.ItemDataRole.DisplayRole:
            return column.text(row)
        if role == SORT_ROLE:
            return column.sort(row) if column.sort else column.text(row).lower()
        if role == ROW_ROLE:
            return row
        if role == Qt.ItemDataRole.ToolTipRole and column.tooltip:
            return column.tooltip(row)
        if role == Qt.ItemDataRole.DecorationRole and column.decoration:
            return column.decoration(row)
        if role == Qt.ItemDataRole.TextAlignmentRole and column.align_right:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def row_at(self, index: QModelIndex) -> Any:
        """The row object behind ``index`` (of this model or a proxy over it)."""
        return index.data(ROW_ROLE)


def make_table(model, accessible_name: str, stretch_column: int = 0):
    """A read-only, row-selecting table view over ``model``: the one look every list shares.

    Columns fit their contents except ``stretch_column``, which takes the remaining width.
    """
    from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView

    view = QTableView()
    view.setAccessibleName(accessible_name)
    view.setModel(model)
    view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    view.setWordWrap(False)
    view.setAlternatingRowColors(True)
    view.verticalHeader().setVisible(False)
    view.verticalHeader().setDefaultSectionSize(24)
    header = view.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(stretch_column, QHeaderView.ResizeMode.Stretch)
    header.setHighlightSections(False)
    return view
