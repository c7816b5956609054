"""Qt-free application core shared by the CLI and the GUI.

Nothing here imports PySide6, and importing this package imports none of its modules
eagerly, so ``quantize`` and ``models`` can use the primitives in ``jobs``, ``errors``
and ``paths`` without pulling the rest of the application in.
"""
