"""The About box's text: QuantDesk, llama.cpp and Qt versions."""

from __future__ import annotations

import PySide6
from PySide6.QtCore import qVersion

from app import __version__
from models.foundation import APP_NAME


def llama_version_text() -> str:
    """llama-cpp-python's version and the CPU features its llama.cpp was built with."""
    from models.foundation.errors import QuantDeskError
    from models.hardware import backend_names
    from models.llama_lib import llama_cpp_python_version

    py_version = llama_cpp_python_version()
    if py_version is None:
        return "not installed"
    try:
        backends = ", ".join(backend_names())
    except QuantDeskError as exc:
        backends = exc.user_message
    return f"llama-cpp-python {py_version} (backends: {backends})"


def install_text() -> str:
    """How QuantDesk was installed, with a bundle's llama.cpp build."""
    from app.core.install_info import install_info

    info = install_info()
    build = f"; {info.backend_text()}" if info.build else ""
    return f"{info.description}{build}"


def about_text() -> str:
    """Plain-text lines shown in the About box."""
    return (
        f"{APP_NAME} {__version__}\n"
        f"Installed as: {install_text()}\n"
        f"llama.cpp: {llama_version_text()}\n"
        f"Qt {qVersion()} (PySide6 {PySide6.__version__})"
    )
