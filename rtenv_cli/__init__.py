"""rtenv: validate, package, push, explain and cache Ray runtime environments."""

__version__ = "0.1.0"
