"""The chat engine: llama.cpp (through llama-cpp-python) in its own process.

llama.cpp can abort the whole process (``GGML_ASSERT``) or fault in a native kernel, so
it never runs in the GUI's or CLI's process. :class:`EngineClient` (``client.py``) starts
a child process with :mod:`multiprocessing`'s ``spawn`` context (a fresh interpreter on
every OS, never a fork of a process that holds Qt or threads) and talks to it over a
duplex :func:`multiprocessing.Pipe`. llama.cpp's own prints go to the child's stdout and
stderr, never into the pipe. As with any ``spawn`` start, the child imports the parent's
main module, so a script that uses the client needs the ``if __name__ == "__main__":``
guard (the ``quantdesk`` entry points and pytest have it; a PyInstaller build calls
:func:`multiprocessing.freeze_support`).

Protocol (pickled dicts; one request at a time, each answered by zero or more
intermediate events and exactly one final event):

===================================================  ==========================================
request (client → engine)                            events (engine → client)
===================================================  ==========================================
``{"op": "load", "path", "settings",                 ``phase`` (``"selftest"``), then
``"rpc_endpoints"}``                                 ``loaded`` ``{"report"}`` or ``error``
``{"op": "chat", "messages", "options",              ``delta`` ``{"text"}`` …, then ``done``
``"conversation_id", "session_cap_bytes"}``          ``{"stats"}`` or ``error``
``{"op": "delete_session", "conversation_id"}``      ``ok`` ``{"deleted"}``
``{"op": "unload"}`` / ``{"op": "shutdown"}``        ``ok``
``{"op": "stats"}``                                  ``stats`` ``{"stats"}``
===================================================  ==========================================

``error`` events carry ``{"what", "fix"}`` and become
:class:`~models.foundation.errors.QuantDeskError` in the client. Cancelling is not a message: a
byte of shared memory (``cancel_flag.py``) that the engine checks between tokens and
llama.cpp checks between the nodes of its compute graph, so a cancel never waits behind
a busy pipe or a long llama.cpp call. A reply ended by cancel,
a stop string, the token limit or a full context is still ``done``, with
``stats["stop_reason"]`` saying which.

Saved sessions (``sessions.py``): a chat with a ``conversation_id`` saves the KV cache
of that conversation to the app's sessions folder *after* its ``done`` event is sent (so
saving never delays a reply; the next request waits for it). When a chat names a
conversation the engine's cache does not hold, the engine first restores its saved state
if that reuses more than the cache does; ``stats["session_restored"]`` says so, and
``stats["session_notice"]`` explains a state that could not be used (another model or KV
setting, a damaged file), in which case the conversation is simply prefilled.

Crashes: the client waits on the pipe *and* the process sentinel. If the process dies,
the request raises :class:`~models.engine.client.EngineCrashed` (text streamed so far on
``partial_text``); the next request starts a new process and reloads the last model. A
crash during the load self-test (the first decode) with llama.cpp's extra buffer types on
is retried once with them off, and remembered for this CPU (``fallback.py``).

Test hook: the environment variable ``QUANTDESK_ENGINE_TEST_CRASH=selftest-extra-bufts``
makes the engine call ``os.abort()`` in the self-test while extra buffer types are on
(see ``runtime.TEST_CRASH_ENV``), so tests drive the real fallback path.

Modules: ``gguf_info`` (header facts), ``settings`` (load settings and their rules),
``options`` (sampling options, messages), ``chat_template`` (Jinja rendering, presets),
``token_stream`` (sampler, UTF-8 and stop-string handling), ``prompt_lookup`` and
``speculation`` (speculative decoding: drafts from the conversation, sized per reply and
checked in the batch), ``draft_model`` (a draft model's guesses), ``cancel_flag`` (the shared
cancel byte and llama.cpp's abort hook), ``llama_log`` (llama.cpp's log
and the offload report), ``runtime`` (the model in the engine), ``child`` (the engine's
loop), ``client`` (the handle the app holds), ``fallback`` (the remembered AMX fallback),
``sessions`` (saved KV states on disk). Remote devices (other computers' workers) are
:mod:`models.rpc`: the client opens their tunnels and checks them, and sends the engine the
``host:port`` endpoints llama.cpp connects to (``rpc_endpoints``).
Only ``client``, ``settings``, ``options``, ``gguf_info``, ``chat_template`` and ``sessions``
are meant for the app's process; the others import llama_cpp and run in the engine.
"""

from importlib import import_module

# Imported on first use (PEP 562): ``from models.engine.settings import LoadSettings`` runs
# this file first, and the client's imports (gguf, numpy: ~0.27 s) must not land in the
# window's launch just because a settings form was built.
_EXPORTS = {"ChatReply": "client", "EngineClient": "client", "EngineCrashed": "client",
            "LoadReport": "client", "ChatOptions": "options", "ChatStats": "options",
            "LoadSettings": "settings"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
