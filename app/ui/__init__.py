"""The Qt user interface: the only package of QuantDesk that imports PySide6."""

import sys


def _keep_singletons_alive() -> None:
    """Work around PySide6 6.12 on CPython 3.11: some calls drop a reference to a
    singleton that they never took, and the interpreter aborts once its count reaches
    zero ("none_dealloc: deallocating None", "bool_dealloc: deallocating True or False"),
    mid-session or while exiting:

    - every call of a Qt method that returns void (``QLabel.setText``,
      ``QTextCursor.insertText``, ``QTimer.start``...) drops one reference to ``None``:
      200 ``QLabel.setText`` calls lower ``sys.getrefcount(None)`` by exactly 200, and a
      window that streams a reply makes thousands within seconds;
    - every successful ``Signal.disconnect`` drops one reference to ``True`` (which starts
      with ~150): 100 connect/disconnect pairs lower it by exactly 100; pytest-qt's
      ``waitSignal`` and a long benchmark disconnect that often, and the process aborted
      while exiting.

    Giving each of them 2**40 extra references makes them as immortal as CPython 3.12
    makes them by itself (where the bug is harmless).
    """
    if sys.version_info >= (3, 12) or sys.implementation.name != "cpython":
        return
    import ctypes

    for singleton in (None, True, False):
        refcount = ctypes.c_ssize_t.from_address(id(singleton))  # ob_refcnt: PyObject's first field
        if refcount.value < 1 << 39:
            refcount.value += 1 << 40


_keep_singletons_alive()
