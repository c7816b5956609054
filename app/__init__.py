"""QuantDesk: run large language models locally.

``app.core`` is the Qt-free glue that the CLI and the GUI share; ``app.ui`` is the only
package that imports PySide6. The lower packages ``quantize`` and ``models`` import only
the leaf modules ``app.core.jobs``, ``app.core.errors``, ``app.core.paths`` and
``app.core.system_programs``.
"""

from importlib.metadata import PackageNotFoundError, version as _dist_version

try:
    __version__ = _dist_version("quantdesk")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

APP_NAME = "QuantDesk"
