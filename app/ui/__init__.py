"""The Qt user interface: the only package of QuantDesk that imports PySide6."""

import sys


def _keep_none_alive() -> None:
    """Work around PySide6 6.12 on CPython 3.11: every call of a Qt method that returns
    void (``QLabel.setText``, ``QTextCursor.insertText``, ``QTimer.start``...) drops one
    reference to ``None`` that it never took. ``None`` starts with a few thousand
    references, so a window that streams a reply or opens a long conversation makes that
    many calls within seconds and the interpreter aborts with "none_dealloc: deallocating
    None". Giving ``None`` 2**40 extra references makes it as immortal as CPython 3.12
    makes it by itself (where the bug is harmless). Measured: 200 ``QLabel.setText``
    calls lower ``sys.getrefcount(None)`` by exactly 200.
    """
    if sys.version_info >= (3, 12) or sys.implementation.name != "cpython":
        return
    import ctypes

    refcount = ctypes.c_ssize_t.from_address(id(None))  # ob_refcnt: PyObject's first field
    if refcount.value < 1 << 39:
        refcount.value += 1 << 40


_keep_none_alive()
