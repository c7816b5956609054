"""The local API server: QuantDesk's models for every other program, over HTTP.

Qt-free, and it never imports llama_cpp: the models run in engine processes
(:mod:`models.engine`), one per model, shared with the window's Chat page.

Modules:

- ``config`` — :class:`ServerConfig` and the rule that a network address needs a key;
- ``api_key`` — the key, stored like the Hugging Face token (a 0600 file);
- ``catalog`` — the Library's GGUF models under the ids clients name;
- ``engine_pool`` — :class:`EnginePool`: one engine per model, loaded on demand with the
  Chat page's settings, refused when memory_fit says it will not fit, unloaded when idle;
  ``adopt`` takes the window's engine;
- ``core`` — what every dialect shares: model resolution, the queue per model (429 past
  its bound), starting a reply and waiting for its first event before answering,
  cancellation when the client leaves, engine faults, the request log;
- ``parameters`` — typed field reading (a 400 with a sentence for each mistake) and the
  mapping onto the engine's options, structured output included;
- ``openai_api`` — the OpenAI dialect (models, chat completions, completions); other
  dialects (Anthropic, Responses, Ollama) go beside it as routers on the same core;
- ``app`` — the Starlette application, the Host allow-list, the key check and CORS;
- ``controller`` — :class:`ServerController`: uvicorn in a background thread;
- ``request_log`` — one :class:`RequestLogEntry` per request.

The window's Server page uses: ``ServerConfig``, ``ServerController`` (``start``,
``stop``, ``running``, ``address``, ``add_listener``, ``models_status``), ``EnginePool``
(``adopt``, ``release``) and ``api_key`` (``load_api_key``, ``generate_api_key``,
``save_api_key``, ``forget_api_key``), as agreed; ``ServerController`` also takes a
``library`` (tests pass their own) and has ``close()`` (stop and unload what it loaded).
"""
