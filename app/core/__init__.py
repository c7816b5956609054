"""Qt-free application core shared by the CLI and the GUI.

Nothing here imports PySide6, and importing this package imports none of its modules
eagerly. What the lower packages need too (errors, jobs, folders, logs) is in
``models.foundation``, below them all.
"""
