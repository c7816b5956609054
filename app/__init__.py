"""QuantDesk: run large language models locally.

``app.core`` is the Qt-free glue that the CLI and the GUI share; ``app.ui`` is the only
package that imports PySide6. The packages below, ``quantize`` and ``models``, import
nothing from here: what every package stands on (errors, long jobs, folders, logs) is
``models.foundation``.
"""

from __future__ import annotations

from models.foundation.versions import installed_version

#: QuantDesk's version ("0.0.0+unknown" in a source tree that was never installed).
__version__ = installed_version("quantdesk") or "0.0.0+unknown"
