"""``quantdesk serve``: the OpenAI-compatible API server, in the foreground.

Serves the Library's models (``quantdesk list``) on 127.0.0.1 by default; models load on
the first request that names them. One line per request; Ctrl+C stops it.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from app.commands.engine_args import add_remote_arguments, remote_settings_from_args
from models.foundation.errors import QuantDeskError

log = logging.getLogger(__name__)

API_KEY_ENV = "QUANTDESK_API_KEY"  # kept out of `ps` listings, unlike --api-key


def _print_entry(entry) -> None:
    print(entry.line(), flush=True)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from app.core.model_settings import load_settings_for
    from models.library import Library
    from models.server.api_key import load_api_key
    from models.server.catalog import find_model
    from models.server.config import ServerConfig
    from models.server.controller import ServerController
    from models.server.engine_pool import EnginePool

    api_key = args.api_key or os.environ.get(API_KEY_ENV) or None
    if api_key is None and args.stored_key:
        api_key = load_api_key()
        if api_key is None:
            raise QuantDeskError("--stored-key was given, but no API key is stored.",
                                 "Generate one on the Server page, or pass --api-key KEY.")
    config = ServerConfig(host=args.host, port=args.port, api_key=api_key,
                          parallel=args.parallel, idle_unload_seconds=args.idle_unload,
                          cors_origins=tuple(args.cors_origin or ()),
                          allowed_hosts=tuple(args.allow_host or ()),
                          queue_limit=args.queue_limit, log_requests=False,
                          prompt_cache_ram_mb=args.prompt_cache_mb,
                          ollama_port=args.ollama_port, image_urls=args.allow_image_urls)
    library = Library()
    preload = []
    for name in args.models:
        model = find_model(library, name)
        if model is None and name.lower().endswith(".gguf") and Path(name).is_file():
            # A file given by path joins the library where it is (as a file dropped on the
            # window does), so requests can name it by its id.
            library.import_path(Path(name))
            model = find_model(library, str(Path(name).expanduser().resolve()))
        if model is None:
            raise QuantDeskError(f"There is no model {name!r} in the library.",
                                 "Run `quantdesk list` to see the models (their file names "
                                 "without .gguf are the ids).")
        preload.append(model)
    remote = remote_settings_from_args(args)
    projectors = {}
    if args.mmproj is not None:
        if len(preload) != 1:
            raise QuantDeskError("--mmproj names the vision encoder of one model, but "
                                 f"{len(preload)} models were given.",
                                 "Give exactly one MODEL with --mmproj (the others find theirs beside them).")
        if not args.mmproj.is_file():
            raise QuantDeskError(f"The vision encoder {args.mmproj} does not exist.",
                                 "Give the path of the model's mmproj GGUF file.")
        projectors[preload[0].path] = str(args.mmproj.expanduser().resolve())

    def settings_for(path):
        settings = load_settings_for(path)
        if remote["remote_devices"]:
            settings = replace(settings, **remote)
        return replace(settings, mmproj=projectors[path]) if path in projectors else settings

    cache = config.prompt_cache_ram_mb
    engines = EnginePool(settings_for, parallel=config.parallel,
                         idle_unload_seconds=config.idle_unload_seconds,
                         prompt_cache_bytes=None if cache is None else cache << 20)
    controller = ServerController(config, engines=engines, library=library)
    controller.add_listener(_print_entry)
    controller.start()
    try:
        for model in preload:
            print(f"Loading {model.id}…", flush=True)
            engine = controller.engines.get(model.path)
            print(f"{model.id}: {engine.slots} slot(s) of {engine.context_per_slot} tokens.",
                  flush=True)
        key_note = "; clients must send the API key" if api_key else ""
        print(f"Serving the OpenAI API on {controller.address}/v1{key_note}. "
              "Ctrl+C stops it.", flush=True)
        stopped = threading.Event()
        if threading.current_thread() is threading.main_thread():
            # A service manager's stop (SIGTERM) ends it as cleanly as Ctrl+C does.
            signal.signal(signal.SIGTERM, lambda signum, frame: stopped.set())
        while not stopped.wait(0.5):
            if not controller.running:
                print("The server stopped unexpectedly; the log file has the details.",
                      file=sys.stderr)
                return 1
        print("Stopping…", flush=True)
    except KeyboardInterrupt:
        print("Stopping…", flush=True)
    finally:
        controller.close()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "serve", help="serve the library's models over an OpenAI-compatible HTTP API",
        description="Serve the library's models over an OpenAI-compatible HTTP API "
                    "(/v1/chat/completions, /v1/completions, /v1/models). Models load on "
                    "the first request that names them, with the load settings the Chat "
                    "page remembers.")
    parser.add_argument("models", nargs="*", metavar="MODEL",
                        help="models to load at once (ids as /v1/models lists them)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1, this computer only; "
                             "any other needs --api-key)")
    parser.add_argument("--port", type=int, default=8080, help="TCP port (default 8080)")
    parser.add_argument("--ollama-port", type=int, default=None,
                        help="also answer Ollama's API (/api/chat, /api/generate, /api/tags…) "
                             "on this port, e.g. 11434 (off by default)")
    parser.add_argument("--api-key", default=None,
                        help="key clients must send (Authorization: Bearer KEY); "
                             f"{API_KEY_ENV} in the environment does the same without showing "
                             "the key to other users' process listings")
    parser.add_argument("--stored-key", action="store_true",
                        help="use the key stored on the Server page")
    parser.add_argument("--parallel", type=int, default=None, metavar="N",
                        help="requests decoded together per model (default: sized to memory)")
    parser.add_argument("--idle-unload", type=float, default=600.0, metavar="SECONDS",
                        help="unload a model after this long unused (0: never; default 600)")
    parser.add_argument("--queue-limit", type=int, default=64, metavar="N",
                        help="requests that may wait for a slot per model; more get 429")
    parser.add_argument("--prompt-cache-mb", type=int, default=None, metavar="MB",
                        help="RAM per model for prompts kept for reuse (default: the engine's)")
    parser.add_argument("--cors-origin", action="append", metavar="ORIGIN",
                        help="a web origin allowed to call the API from a browser (repeatable)")
    parser.add_argument("--allow-host", action="append", metavar="NAME",
                        help="a host name the server answers to besides localhost and its "
                             "address (repeatable)")
    parser.add_argument("--allow-image-urls", action="store_true",
                        help="download images that requests give as http(s) addresses (10 s and "
                             "32 MB at most each); off by default, so requests cannot make the "
                             "server reach other machines")
    parser.add_argument("--mmproj", type=Path, default=None, metavar="FILE",
                        help="the vision encoder (mmproj GGUF) of the one MODEL given; by default "
                             "each model loads the mmproj-*.gguf beside it, if any")
    add_remote_arguments(parser.add_argument_group(
        "remote devices", "other computers' devices for every model this server loads"))
    parser.set_defaults(func=run)
