"""The Models page: the Hub, downloads and the Library of models on disk."""
