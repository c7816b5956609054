"""Entry point of the frozen app: both executables (windowed ``QuantDesk`` and console
``quantdesk``) run this script, then the same ``app.cli.main`` as the source install.

Order matters:

1. ``multiprocessing.freeze_support()`` first. The engine runs in a *spawned* child
   process, and a frozen child is this same executable started with
   ``--multiprocessing-fork``; freeze_support (patched by PyInstaller's runtime hook to
   work on every OS) turns that start into the engine child instead of a second app.
2. Numba (when a build has it) caches compiled kernels beside a module's source by
   default; the bundle is read-only (``/opt/quantdesk``), so kernels go to the app's
   cache folder unless ``NUMBA_CACHE_DIR`` says otherwise.
"""

import multiprocessing
import os
import sys

if __name__ == "__main__":
    multiprocessing.freeze_support()

    # os.environ keeps the bootloader's LD_LIBRARY_PATH (the engine child needs it);
    # programs of the system are started through models.foundation.system_programs instead.
    if "NUMBA_CACHE_DIR" not in os.environ:
        from models.foundation.paths import app_paths

        os.environ["NUMBA_CACHE_DIR"] = str(app_paths().cache / "numba")

    from app.cli import main

    sys.exit(main())
