"""The Server page: the local OpenAI-compatible API server (:mod:`models.server`) in the window."""
