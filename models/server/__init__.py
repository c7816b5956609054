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
- ``openai_api`` — the OpenAI dialect (models, chat completions, completions,
  embeddings); beside it, on the same core, ``responses_api`` (OpenAI Responses,
  stateless), ``anthropic_api`` (Messages, count_tokens) and ``ollama_api`` (Ollama's API
  on a port of its own); each only translates;
- ``tool_calls`` — function tools for every dialect: the call format a template expects,
  the grammar that makes calls valid, the parsers (whole and streamed);
- a reasoning model's thinking is split from the answer in ``core`` (the engine's
  ``models.engine.reasoning``), so each dialect only names the parts;
- ``app`` — the Starlette application, the Host allow-list, the key check and CORS;
- ``controller`` — :class:`ServerController`: uvicorn in a background thread;
- ``request_log`` — one :class:`RequestLogEntry` per request.

The window's Server page uses: ``ServerConfig``, ``ServerController`` (``start``,
``stop``, ``running``, ``address``, ``add_listener``, ``models_status``), ``EnginePool``
(``adopt``, ``release``) and ``api_key`` (``load_api_key``, ``generate_api_key``,
``save_api_key``, ``forget_api_key``), as agreed. Additions to that agreement:
``ServerController`` also takes a ``library`` (tests pass their own), has ``port`` (the
one bound, when port 0 asked for a free one), ``remove_listener`` and ``close()`` (stop,
then unload the models the server loaded); ``RequestLogEntry`` also has ``seconds`` (the
request's whole time) and ``line()``; ``EnginePool`` takes ``prompt_cache_bytes``
(``ServerConfig.prompt_cache_ram_mb`` reaches it when the controller makes the pool).
"""
