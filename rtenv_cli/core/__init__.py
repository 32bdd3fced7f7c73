"""The core: no typer, no rich, no printing.

Functions return frozen dataclasses and raise RtenvError.
"""
