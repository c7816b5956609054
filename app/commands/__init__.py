"""Subcommands of the ``quantdesk`` CLI, one module each.

A module here defines ``register(subparsers)``, which adds its parser and sets
``func`` to a function taking the parsed arguments and returning an exit code. To add
a command, write its module and list it in :data:`COMMAND_MODULES`.
"""

COMMAND_MODULES = [
    "app.commands.doctor",
    "app.commands.convert",
    "app.commands.quantize", "app.commands.imatrix", "app.commands.evaluate",
    "app.commands.search", "app.commands.pull", "app.commands.list", "app.commands.rm",
    "app.commands.chat", "app.commands.chats", "app.commands.bench", "app.commands.serve",
    "app.commands.worker", "app.commands.schema",
]
