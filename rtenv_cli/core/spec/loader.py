"""Load a runtime_env file the way Ray does, and remember where every key and value came from.

Ray's `ray job submit --runtime-env FILE` opens FILE in text mode with the locale encoding and
calls `yaml.safe_load` on it, for `.json` files too. So JSON is parsed as YAML 1.1 (`1e3` is a
string, tabs fail, duplicate keys are accepted). We run the same pure-Python `SafeLoader` (not the
libyaml `CSafeLoader`: the two scanners disagree on edge cases and Ray uses the pure one), but we
keep the composed node tree so that every key and value gets a 1-based `Span`.

Nothing here raises for bad input: a parse failure is `LoadedDoc.error`, with its position.
Hostile input is bounded: a file over `MAX_FILE_BYTES`, a device or FIFO, and a document whose
aliases expand past `MAX_ALIAS_NODES` nodes are refused before they cost time or memory (Ray's
own `safe_load` would follow them). `read_text` is the one way to read an option file (explain's
`--node-env-file`): the same checks, and a clear error instead of an exception.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import yaml

JsonPath = tuple[Any, ...]
MAX_FILE_BYTES = 10 * 1024 * 1024  # a runtime_env is a few KiB; this bounds memory and time
MAX_ALIAS_NODES = 100_000  # nodes reached through aliases (a "billion laughs" file has millions)
LIMIT_KIND = "LimitExceeded"  # ParseError.kind of what rtenv refuses before Ray's parser runs


@dataclass(frozen=True)
class Span:
    """A 1-based source range (end is exclusive, as PyYAML's end marks are)."""

    line: int
    column: int
    end_line: int
    end_column: int

    def to_dict(self) -> dict[str, int]:
        return {"line": self.line, "column": self.column, "end_line": self.end_line,
                "end_column": self.end_column}


@dataclass(frozen=True)
class ParseError:
    """Why Ray's parser refuses the file; `kind` is the Python exception Ray would raise."""

    kind: str
    message: str
    span: Span | None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message,
                "span": self.span.to_dict() if self.span else None}


@dataclass(frozen=True)
class DuplicateKey:
    """A mapping key given twice; YAML 1.1 (and Ray) silently keeps the last value."""

    path: JsonPath
    first: Span
    second: Span


@dataclass
class Positions:
    """Spans of keys and values by JSON path (a tuple of str keys and int indices)."""

    keys: dict[JsonPath, Span] = field(default_factory=dict)
    values: dict[JsonPath, Span] = field(default_factory=dict)
    duplicates: list[DuplicateKey] = field(default_factory=list)

    def key(self, json_path: JsonPath) -> Span | None:
        return self.keys.get(tuple(json_path))

    def value(self, json_path: JsonPath) -> Span | None:
        return self.values.get(tuple(json_path))

    def best(self, json_path: JsonPath) -> Span | None:
        """The key's span if there is one, else the value's, else the nearest parent's."""
        path = tuple(json_path)
        while True:
            span = self.keys.get(path) or self.values.get(path)
            if span is not None or not path:
                return span
            path = path[:-1]


@dataclass(frozen=True)
class LoadedDoc:
    path: str
    data: object
    positions: Positions
    error: ParseError | None
    text: str | None = None  # the decoded source (for carets); None when undecodable

    @property
    def ok(self) -> bool:
        return self.error is None


def _span(node: yaml.Node) -> Span:
    start, end = node.start_mark, node.end_mark
    return Span(start.line + 1, start.column + 1, end.line + 1, end.column + 1)


def _hashable(obj: object) -> bool:
    try:
        hash(obj)
    except TypeError:
        return False
    return True


class _Walker:
    """Walks the composed node tree beside the constructed data and records spans."""

    def __init__(self, positions: Positions) -> None:
        import yaml  # not at the top: validating a dict (a push of a directory) needs no YAML

        self.positions = positions
        self.keys = yaml.SafeLoader("")  # a constructor for key scalars only
        self._seen: set[int] = set()

    def _key(self, node: yaml.Node) -> object:
        import yaml

        try:
            value = self.keys.construct_object(node, deep=True)
        except yaml.YAMLError:
            return None
        return value if _hashable(value) else None

    def walk(self, node: yaml.Node, path: JsonPath) -> None:
        import yaml

        self.positions.values.setdefault(path, _span(node))
        if id(node) in self._seen:  # aliases may form cycles; one visit per node
            return
        self._seen.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                self._mapping(node, path)
            elif isinstance(node, yaml.SequenceNode):
                for index, item in enumerate(node.value):
                    self.walk(item, (*path, index))
        finally:
            self._seen.discard(id(node))

    def _mapping(self, node: yaml.MappingNode, path: JsonPath) -> None:
        import yaml

        seen: dict[object, Span] = {}
        merged: list[yaml.Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                merged.append(value_node)
                continue
            key = self._key(key_node)
            child = (*path, key)
            span = _span(key_node)
            if key in seen:
                self.positions.duplicates.append(DuplicateKey(child, seen[key], span))
            seen[key] = span
            # the last occurrence wins, in the data and in the positions
            self.positions.keys[child] = span
            self.positions.values.pop(child, None)
            self.walk(value_node, child)
        # `<<: *anchor` keys only fill what the mapping itself does not set
        sources: list[yaml.Node] = []
        for value_node in merged:
            if isinstance(value_node, yaml.SequenceNode):
                sources.extend(value_node.value)
            else:
                sources.append(value_node)
        for source in sources:
            if not isinstance(source, yaml.MappingNode):
                continue
            for key_node, value_node in source.value:
                key = self._key(key_node)
                child = (*path, key)
                if key in seen or child in self.positions.keys:
                    continue
                self.positions.keys[child] = _span(key_node)
                self.walk(value_node, child)


UNCLOSED_QUOTE = "while scanning a quoted scalar"  # PyYAML's context of a quote never closed


def _problem_span(exc: yaml.MarkedYAMLError) -> Span | None:
    """Where the error is: for a quote never closed, the quote (the problem PyYAML marks is
    the end of the file, far from the mistake)."""
    unclosed = exc.context == UNCLOSED_QUOTE and exc.context_mark is not None
    mark = exc.context_mark if unclosed else exc.problem_mark or exc.context_mark
    if mark is None:
        return None
    return Span(mark.line + 1, mark.column + 1, mark.line + 1, mark.column + 2)


class AliasLimitError(Exception):
    """Aliases expand the document past MAX_ALIAS_NODES nodes."""

    def __init__(self, message: str, span: Span) -> None:
        super().__init__(message)
        self.span = span


def _node_count(node: yaml.Node, memo: dict[int, int]) -> int:
    """Nodes in `node`'s tree with every alias expanded (shared subtrees counted once each
    time they are reached, as the walk and the data would); a cycle's back edge counts 1."""
    stack: list[tuple[Any, bool]] = [(node, False)]
    open_ids: set[int] = set()
    while stack:
        current, done = stack.pop()
        key = id(current)
        if key in memo:
            continue
        children = _children(current)
        if done:
            open_ids.discard(key)
            memo[key] = 1 + sum(memo.get(id(c), 1) for c in children)
            continue
        open_ids.add(key)
        stack.append((current, True))
        stack.extend((c, False) for c in children if id(c) not in memo and id(c) not in open_ids)
    return memo[id(node)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    value = node.value
    if not isinstance(value, list):
        return []
    out: list[yaml.Node] = []
    for item in value:
        if isinstance(item, tuple):
            out.extend(item)
        else:
            out.append(item)
    return out


def _bounded_loader(text: str) -> yaml.SafeLoader:
    """Ray's `SafeLoader`, counting what its aliases expand to while it composes."""
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        expanded = 0
        sizes: dict[int, int]

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                target = self.anchors.get(event.anchor)
                if target is not None:
                    self.expanded += _node_count(target, self.sizes)
                    if self.expanded > MAX_ALIAS_NODES:
                        mark = event.start_mark
                        raise AliasLimitError(
                            f"too many aliases: they expand the document past "
                            f"{MAX_ALIAS_NODES:,} nodes (rtenv refuses this; Ray's parser "
                            "would build all of them)",
                            Span(mark.line + 1, mark.column + 1, mark.line + 1,
                                 event.end_mark.column + 1))
            return super().compose_node(parent, index)

    loader = BoundedLoader(text)
    loader.sizes = {}
    return loader


def _limit_error(message: str, span: Span | None = None) -> ParseError:
    return ParseError(LIMIT_KIND, message, span)


def _failed(exc: BaseException, name: str, positions: Positions, text: str) -> LoadedDoc:
    """The document of a parse that raised `exc`, with Ray's exception kind and its position."""
    import yaml

    if isinstance(exc, AliasLimitError):
        return LoadedDoc(name, None, Positions(), _limit_error(str(exc), exc.span), text)
    if isinstance(exc, yaml.MarkedYAMLError):
        message = " ".join(part for part in (exc.context, exc.problem) if part)
        return LoadedDoc(name, None, positions, ParseError(type(exc).__name__,
                                                            message or str(exc),
                                                            _problem_span(exc)), text)
    if isinstance(exc, RecursionError):
        return LoadedDoc(name, None, Positions(), ParseError(
            "RecursionError", "the document nests too deeply for Python's parser "
            "(maximum recursion depth exceeded)", None), text)
    # other YAMLErrors (ReaderError for control characters), and constructor bugs on odd input
    # (ValueError/TypeError, e.g. huge exponents): Ray's safe_load raises the same
    return LoadedDoc(name, None, positions, ParseError(type(exc).__name__, str(exc), None), text)


def _parse(text: str, name: str, read: Callable[[yaml.SafeLoader, Positions], object]
           ) -> LoadedDoc:
    """Run `read` on Ray's loader over `text`; any failure is the document's ParseError."""
    import yaml

    positions = Positions()
    # Ray opens the file in text mode: universal newlines
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    try:
        # the Reader checks the characters in the constructor already (ReaderError)
        loader = _bounded_loader(text)
    except yaml.YAMLError as exc:
        return _failed(exc, name, positions, text)
    try:
        data = read(loader, positions)
    except (AliasLimitError, yaml.YAMLError, RecursionError, ValueError, TypeError) as exc:
        return _failed(exc, name, positions, text)
    finally:
        loader.dispose()
    return LoadedDoc(name, data, positions, None, text)


def _single(loader: yaml.SafeLoader, positions: Positions) -> object:
    node = loader.get_single_node()
    if node is None:
        return None
    # walk before constructing: construction folds `<<` merge keys into the tree
    _Walker(positions).walk(node, ())
    # compose first, construct second: exactly what SafeLoader.get_single_data does
    return loader.construct_document(node)


def load_text(text: str, name: str) -> LoadedDoc:
    """Parse already-decoded text with Ray's parser (`yaml.safe_load`)."""
    return _parse(text, name, _single)


def decode(raw: bytes, name: str) -> tuple[str | None, ParseError | None]:
    """Decode like Ray's `open(FILE, "r")`: the locale's preferred encoding, strict errors."""
    import locale

    encoding = locale.getpreferredencoding(False)
    try:
        return raw.decode(encoding), None
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line = before.count(b"\n") + 1
        column = exc.start - (before.rfind(b"\n") + 1) + 1
        message = (f"'{exc.encoding}' codec can't decode byte 0x{raw[exc.start]:02x} in "
                   f"position {exc.start}: {exc.reason}")
        return None, ParseError("UnicodeDecodeError", message,
                                Span(line, column, line, column + 1))


def _too_large(size: int, limit: int) -> ParseError:
    return _limit_error(f"the file is {size / 1024 / 1024:.1f} MiB, over rtenv's "
                        f"{limit // 1024 // 1024} MiB limit for a file it reads (a runtime_env "
                        "or a requirements file)")


def load_bytes(raw: bytes, name: str, *, limit: int = MAX_FILE_BYTES) -> LoadedDoc:
    if len(raw) > limit:
        return LoadedDoc(name, None, Positions(), _too_large(len(raw), limit), None)
    text, error = decode(raw, name)
    if text is None:
        return LoadedDoc(name, None, Positions(), error, None)
    return load_text(text, name)


def _file_type(mode: int) -> str:
    import stat

    for test, what in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"


def read_file(path: Path | str, *, limit: int = MAX_FILE_BYTES
              ) -> tuple[bytes | None, ParseError | None]:
    """A regular file's bytes, at most `limit` of them; devices, FIFOs and sockets are refused
    without reading (a FIFO is opened non-blocking: no writer is waited for)."""
    import os
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        return None, ParseError("OSError", exc.strerror or str(exc), None)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, ParseError("OSError", f"{_file_type(info.st_mode)}, not a regular "
                                    "file: rtenv reads regular files only", None)
        if info.st_size > limit:
            return None, _too_large(info.st_size, limit)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=True) as fh:
            fd = -1
            raw = fh.read(limit + 1)  # the file may grow after fstat
    except OSError as exc:
        return None, ParseError("OSError", exc.strerror or str(exc), None)
    finally:
        if fd >= 0:
            os.close(fd)
    if len(raw) > limit:
        return None, _too_large(len(raw), limit)
    return raw, None


def read_stream(stream: IO[bytes] | None, *, limit: int = MAX_FILE_BYTES) -> bytes | None:
    """Up to `limit + 1` bytes of a stream (standard input); None when it is closed."""
    if stream is None:
        return None
    try:
        return stream.read(limit + 1)
    except (OSError, ValueError):  # closed descriptor, or a closed file object
        return None


def read_bytes(path: Path | str, what: str, *, limit: int = MAX_FILE_BYTES) -> bytes:
    """A file rtenv reads for a command (an option file, a requirements file) as `read_file`
    reads it (a regular file, at most `limit` bytes), or a ConfigError naming `what` and the
    path, and what is wrong."""
    raw, error = read_file(path, limit=limit)
    if raw is not None:
        return raw
    assert error is not None  # noqa: S101 - read_file returns one of the two
    raise _read_error(path, what, error)


def read_text(path: Path | str, what: str, *, limit: int = MAX_FILE_BYTES) -> str:
    """An option file (`--node-env-file`, explain's runtime_env) or a requirements file as
    text, decoded as Ray decodes it, or a ConfigError naming the option, the file and what is
    wrong (with the byte offset of a bad byte)."""
    text, error = decode(read_bytes(path, what, limit=limit), str(path))
    if text is not None:
        return text
    assert error is not None  # noqa: S101 - decode returns one of the two
    raise _read_error(path, what, error)


def _read_error(path: Path | str, what: str, error: ParseError) -> Exception:
    from rtenv_cli.core.errors import ConfigError

    where = f":{error.span.line}:{error.span.column}" if error.span else ""
    hints = {"UnicodeDecodeError": "save the file as UTF-8",
             LIMIT_KIND: "pass the file itself, not a larger one holding it"}
    prefix = f"{what} " if what else ""
    return ConfigError(f"{prefix}{path}{where}: {error.message}", path=str(path),
                       hint=hints.get(error.kind, "pass an existing, readable regular file"))


def load_path(path: Path | str, *, limit: int = MAX_FILE_BYTES) -> LoadedDoc:
    """Load a file; an unreadable file is a `ParseError` of kind `OSError`, never an exception."""
    name = str(path)
    raw, error = read_file(path, limit=limit)
    if raw is None:
        return LoadedDoc(name, None, Positions(), error, None)
    return load_bytes(raw, name, limit=limit)


def _every(loader: yaml.SafeLoader, positions: Positions) -> object:
    documents: list[object] = []
    walker = _Walker(positions)
    while loader.check_node():
        node = loader.get_node()
        walker.walk(node, (len(documents),))
        documents.append(loader.construct_document(node))
    return documents


def load_documents(text: str, name: str) -> LoadedDoc:
    """Every document of a `---`-separated stream (a Kubernetes manifest): `data` is their list
    and positions are keyed `(index, *path)`, in file lines. Ray reads one document per
    runtime_env file; this is for files that carry runtime_envs inside, never for the verdict
    of a runtime_env file itself."""
    return _parse(text, name, _every)
