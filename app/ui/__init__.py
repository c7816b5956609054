"""The Qt user interface: the only package of QuantDesk that imports PySide6."""
