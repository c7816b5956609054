"""The Chat page: conversations with a model running in the engine process."""
