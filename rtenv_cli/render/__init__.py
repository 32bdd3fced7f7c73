"""The only package that imports rich. Core results come in, text or JSON goes out."""

from rtenv_cli.render.output import Output

__all__ = ["Output"]
