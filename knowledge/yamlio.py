"""Reading knowledge-base YAML safely, remembering where each mapping came from.

Only ``yaml.SafeLoader`` is used (no Python tags, no arbitrary objects). Every
mapping is returned as a :class:`Located` dict that knows its file and line, so
a rule that names an unknown metric fails with ``rules.yaml:42: ...``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError


class KnowledgeError(ValueError):
    """A knowledge-base file is malformed; the message starts with file:line."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None) -> None:
        where = f"{file}:{line}: " if file and line else (f"{file}: " if file else "")
        super().__init__(f"{where}{message}")
        self.message = message
        self.file = file
        self.line = line


#: libyaml's C parser when PyYAML was built with it (about 10x faster: the
#: documents file is 2,000 lines and is read at every start), else pure Python.
#: Either way only the *safe* constructors exist: no Python tags, no objects.
_BASE_LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class Located(dict[Any, Any]):
    """A YAML mapping that remembers its file, its line and each key's line (1-based)."""

    def __init__(self, line: int = 0, file: str = "<string>") -> None:
        super().__init__()
        self.line = line
        self.file = file
        #: Line of each key's value, and of the key itself (they differ for a
        #: block value, which starts on the next line).
        self.lines: dict[str, int] = {}
        self.key_lines: dict[str, int] = {}


class LocatedList(list[Any]):
    """A YAML sequence that remembers its own line and the line of each item."""

    def __init__(self, line: int = 0, file: str = "<string>") -> None:
        super().__init__()
        self.line = line
        self.file = file
        self.lines: list[int] = []


class LineLoader(_BASE_LOADER):
    """A safe loader plus line bookkeeping; nothing unsafe is added."""

    file = "<string>"


def _construct_map(loader: LineLoader, node: yaml.MappingNode) -> Iterator[Located]:
    data = Located(node.start_mark.line + 1, loader.file)
    yield data
    loader.flatten_mapping(node)
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            raise ConstructorError(
                None, None, f"mapping keys must be strings, got {key!r}", key_node.start_mark
            )
        if key in data:
            raise ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        data[key] = loader.construct_object(value_node, deep=True)
        data.lines[key] = value_node.start_mark.line + 1
        data.key_lines[key] = key_node.start_mark.line + 1


def _construct_seq(loader: LineLoader, node: yaml.SequenceNode) -> Iterator[LocatedList]:
    data = LocatedList(node.start_mark.line + 1, loader.file)
    yield data
    for child in node.value:
        data.append(loader.construct_object(child, deep=True))
        data.lines.append(child.start_mark.line + 1)


LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)
LineLoader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


def load_yaml_text(text: str, file: str) -> Any:
    """Parse YAML text safely; errors become KnowledgeError with file and line."""
    loader = LineLoader(text)
    loader.file = file
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise KnowledgeError(
            f"not valid YAML: {exc.problem or exc.context or exc}", file, line
        ) from exc
    except yaml.YAMLError as exc:
        raise KnowledgeError(f"not valid YAML: {exc}", file) from exc
    finally:
        loader.dispose()


def load_yaml_file(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise KnowledgeError(f"cannot read: {exc.strerror}", str(path)) from exc
    return load_yaml_text(text, str(path))


def where(node: object) -> tuple[str | None, int | None]:
    """File and line of a Located mapping (None, None for other values)."""
    if isinstance(node, Located):
        return node.file, node.line
    return None, None


def fail(node: object, message: str) -> KnowledgeError:
    """A KnowledgeError located at ``node``."""
    file, line = where(node)
    return KnowledgeError(message, file, line)


def require(node: object, key: str, kind: type | tuple[type, ...] = object) -> Any:
    """``node[key]``, checked to exist and be of ``kind``, else a located error."""
    if not isinstance(node, dict):
        raise fail(node, f"expected a mapping with '{key}'")
    if key not in node:
        raise fail(node, f"missing '{key}'")
    value = node[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise fail(node, f"'{key}' must be {names}, not {type(value).__name__}")
    return value


def only_keys(node: object, allowed: Iterable[str], what: str) -> None:
    """Reject a key ``node`` may not have, at that key's line.

    As Prometheus' rule parser does: a misspelt ``keep_firing_for`` must not be
    silently ignored, or the rule runs without the hysteresis its author wrote.
    """
    if not isinstance(node, dict):
        return
    known = list(allowed)
    for key in node:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else f" (expected {', '.join(known)})"
        line = node.key_lines.get(key, node.line) if isinstance(node, Located) else None
        raise KnowledgeError(f"{what}: unknown key '{key}'{hint}", where(node)[0], line)
