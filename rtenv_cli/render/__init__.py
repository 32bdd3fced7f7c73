"""The only package that imports rich. Core results come in, text or JSON goes out."""

from rtenv_cli.render.output import Output, current_output

__all__ = ["Output", "current_output"]
