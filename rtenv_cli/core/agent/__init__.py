"""The rtenv agent: the HTTP server in front of the store (`core.store`)."""
