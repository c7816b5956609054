"""Other computers' devices for a model: llama.cpp's RPC backend (``GGML_RPC``).

A helper computer runs ``quantdesk worker`` (:mod:`models.rpc.worker`): llama.cpp's RPC
server on its devices. The loading side lists it as a remote device in the load settings
(``host:port``, or ``ssh://user@host`` through an SSH tunnel), and llama.cpp places part of
the model's layers there.

Modules:

- ``endpoints``: the "remote devices" a user writes, parsed and checked (no llama.cpp).
- ``probe``: the RPC handshake (``HELLO``) spoken from Python, so an unreachable worker or
  one of another protocol version is refused with a sentence before llama.cpp, which
  aborts the process on either, ever connects.
- ``tunnel``: SSH tunnels (the system's ``ssh -L``) for ``ssh://`` entries.
- ``session``: what the app's process holds while a model uses remote devices: the
  tunnels and the endpoints llama.cpp must use, and the sentence naming a worker that
  stopped answering.
- ``devices``: in the engine process, the remote devices added to the model params
  (``ggml_backend_rpc_add_server`` through the backend registry).
- ``worker``: the RPC server process.

Security: llama.cpp's RPC protocol has no authentication and no encryption, and anyone who
reaches a worker's port can run computations on it and read what it holds. Workers listen
on 127.0.0.1 by default; between computers, use the ``ssh://`` form.
"""
