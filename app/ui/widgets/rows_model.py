"""One table model for every list of plain rows: Library models, Hub results, downloads.

A :class:`RowsTableModel` holds a Python list of rows (dataclasses from the core) and a
list of :class:`Column` (header, how to show a row, how to sort it). It sorts itself with
one key per row (``list.sort``), not with a comparison calling back into Python for every
pair as ``QSortFilterProxyModel`` would; :class:`RowsFilterProxy` filters on one cached
lowercase text per row. No widget per row: hundreds of rows stay instant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, QSortFilterProxyModel, Qt

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
    foreground: Optional[Callable[[Any], Any]] = None  # a QColor for the text, or None


class RowsTableModel(QAbstractTableModel):
    """A table over ``rows`` (any objects) shown through ``columns``."""

    def __init__(self, columns: Sequence[Column], parent=None) -> None:
        super().__init__(parent)
        self.columns = list(columns)
        self.rows: list[Any] = []
        self._haystacks: dict[int, str] = {}
        self._sort: Optional[tuple[int, Qt.SortOrder]] = None

    def set_rows(self, rows: Sequence[Any]) -> None:
        """Replace every row (one reset: cheap for a view, even with hundreds of rows)."""
        self.beginResetModel()
        self.rows = list(rows)
        self._haystacks.clear()
        if self._sort is not None:
            self._sort_rows(*self._sort)
        self.endResetModel()

    def haystack(self, row: int) -> str:
        """Every column's text of ``row``, lowercased, for filtering (cached until the row changes)."""
        obj = self.rows[row]
        text = self._haystacks.get(id(obj))
        if text is None:
            text = "\t".join(c.text(obj) for c in self.columns).lower()
            self._haystacks[id(obj)] = text
        return text

    def _key(self, column: int):
        col = self.columns[column]
        if col.sort is not None:
            return lambda r: (col.sort(r) is None, col.sort(r))
        return lambda r: col.text(r).lower()

    def _sort_rows(self, column: int, order: Qt.SortOrder) -> None:
        self.rows.sort(key=self._key(column), reverse=order == Qt.SortOrder.DescendingOrder)

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """Sort by ``column`` (its sort key, else its text), keeping selections on their rows."""
        if not 0 <= column < len(self.columns):
            return
        self._sort = (column, order)
        self.layoutAboutToBeChanged.emit()
        old = self.persistentIndexList()
        old_rows = [self.rows[i.row()] for i in old]
        self._sort_rows(column, order)
        where = {id(r): i for i, r in enumerate(self.rows)}
        self.changePersistentIndexList(old, [self.index(where[id(r)], i.column()) for r, i in zip(old_rows, old)])
        self.layoutChanged.emit()

    def update_row(self, row: Any) -> None:
        """Repaint ``row`` (the same object, changed in place), or append it if new."""
        self._haystacks.pop(id(row), None)
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
        if role == Qt.ItemDataRole.ForegroundRole and column.foreground:
            return column.foreground(row)
        if role == Qt.ItemDataRole.TextAlignmentRole and column.align_right:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def row_at(self, index: QModelIndex) -> Any:
        """The row object behind ``index`` (of this model or a proxy over it)."""
        return index.data(ROW_ROLE)


class RowsFilterProxy(QSortFilterProxyModel):
    """Filters a :class:`RowsTableModel` by a case-insensitive substring of any column.

    Sorting is passed to the source model (one key per row); the proxy keeps its order.
    """

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._needle = ""

    def set_filter_text(self, text: str) -> None:
        self.beginFilterChange()
        self._needle = text.strip().lower()
        self.endFilterChange(QSortFilterProxyModel.Direction.Rows)

    def filterAcceptsRow(self, source_row: int, source_parent) -> bool:  # noqa: N802 (Qt's name)
        return not self._needle or self._needle in self.sourceModel().haystack(source_row)

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        self.sourceModel().sort(column, order)


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
