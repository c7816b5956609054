"""What every other package stands on: user-facing errors, long jobs, folders, logs.

Qt-free and free of the rest of QuantDesk: ``quantize``, ``models`` and ``app`` all
import these modules, and none of them imports anything above it. The installer build
scripts in ``packaging/`` import :mod:`system_programs` (and :mod:`errors`) with the
system's Python, so those two use the standard library only. Importing this package
imports none of its modules.
"""

#: The product's name: the title of its window and the name of its folders.
APP_NAME = "QuantDesk"
