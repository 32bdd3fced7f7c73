"""The rtenv agent: a crash-safe store of packages, blobs and environments, and its HTTP server."""
