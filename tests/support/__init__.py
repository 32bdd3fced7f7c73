"""Shared test helpers: CLI runner, free ports, a real Ray head, processes stopped by PID."""
