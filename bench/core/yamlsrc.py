"""YAML loading that remembers where each value came from, so errors can name the line."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bench.core.errors import BenchInputError

Loc = tuple[str | int, ...]


class Located:
    """A parsed YAML document plus the line number (1-based) of every key and list item in it."""

    def __init__(self, path: str, data: Any, lines: dict[Loc, int]):
        self.path = path
        self.data = data
        self.lines = lines

    def line_of(self, loc: Loc) -> int | None:
        # The deepest known prefix: a pydantic loc may point below what YAML saw (e.g. into a default).
        for n in range(len(loc), -1, -1):
            if tuple(loc[:n]) in self.lines:
                return self.lines[tuple(loc[:n])]
        return None

    def where(self, loc: Loc) -> str:
        line = self.line_of(loc)
        return f"{self.path}:{line}" if line else self.path


MAX_VALUES = 100_000  # far above any real matrix; aliases that expand past it are a "billion laughs" bomb


def _convert(node: yaml.Node, loc: Loc, lines: dict[Loc, int], path: str) -> Any:
    lines.setdefault(loc, node.start_mark.line + 1)
    if len(lines) > MAX_VALUES or len(loc) > 50:
        raise BenchInputError(f"more than {MAX_VALUES:,} values or nested over 50 deep (YAML aliases expanding?)",
                              f"{path}:{node.start_mark.line + 1}")
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise BenchInputError("mapping keys must be plain scalars", f"{path}:{key_node.start_mark.line + 1}")
            if key_node.tag == "tag:yaml.org,2002:merge":
                key = "<<"
            else:
                key = _scalar(key_node) if key_node.tag != "tag:yaml.org,2002:str" else key_node.value
            if key == "<<":
                raise BenchInputError("YAML merge keys (<<) are not supported",
                                      f"{path}:{key_node.start_mark.line + 1}")
            if not isinstance(key, str):
                key = str(key)
            if key in out:
                raise BenchInputError(f"duplicate key '{key}'", f"{path}:{key_node.start_mark.line + 1}")
            child = loc + (key,)
            lines[child] = key_node.start_mark.line + 1
            out[key] = _convert(value_node, child, lines, path)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, loc + (i,), lines, path) for i, item in enumerate(node.value)]
    # Scalars: let PyYAML's safe constructor resolve the type (int, bool, null, ...).
    return _scalar(node)


def _scalar(node: yaml.ScalarNode) -> Any:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    finally:
        loader.dispose()


def load_yaml_file(path: str | Path) -> Located:
    """Read and parse `path`; any problem becomes a BenchInputError naming the file (and line)."""
    p = Path(path)
    if not p.exists():
        raise BenchInputError("no such file", str(p))
    if p.is_dir():
        raise BenchInputError("is a directory, expected a YAML file", str(p))
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise BenchInputError(f"cannot read: {e.strerror}", str(p)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise BenchInputError(f"not valid UTF-8 (byte {e.start})", f"{p}:{line}") from None
    return load_yaml_text(text, str(p))


def load_yaml_text(text: str, path: str = "<string>") -> Located:
    try:
        docs = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except RecursionError:
        raise BenchInputError("invalid YAML: nested too deeply", path) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{path}:{mark.line + 1}" if mark else path
        raise BenchInputError(f"invalid YAML: {e.problem or e.context}", where) from None
    except yaml.YAMLError as e:
        raise BenchInputError(f"invalid YAML: {e}", path) from None
    if len(docs) != 1 or docs[0] is None:
        raise BenchInputError("expected exactly one YAML document (a mapping)", path)
    lines: dict[Loc, int] = {}
    try:
        data = _convert(docs[0], (), lines, path)
    except yaml.constructor.ConstructorError as e:
        mark = e.problem_mark
        raise BenchInputError(f"invalid YAML value: {e.problem}", f"{path}:{mark.line + 1}" if mark else path) from None
    return Located(path, data, lines)
