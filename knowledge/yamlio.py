"""Reading knowledge-base YAML safely, remembering where each mapping came from.

Only ``yaml.SafeLoader`` is used (no Python tags, no arbitrary objects). Every
mapping is returned as a :class:`Located` dict that knows its file and line, so
a rule that names an unknown metric fails with ``rules.yaml:42: ...``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class KnowledgeError(ValueError):
    """A knowledge-base file is malformed; the message starts with file:line."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None) -> None:
        where = f"{file}:{line}: " if file and line else (f"{file}: " if file else "")
        super().__init__(f"{where}{message}")
        self.message = message
        self.file = file
        self.line = line


class Located(dict[Any, Any]):
    """A mapping from YAML that remembers its file and 1-based line."""

    file: str = "<string>"
    line: int = 0


def _loader_for(file: str) -> type[yaml.SafeLoader]:
    class LineLoader(yaml.SafeLoader):
        pass

    def construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> Located:
        mapping = Located(loader.construct_mapping(node, deep=True))
        mapping.file = file
        mapping.line = node.start_mark.line + 1
        return mapping

    LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return LineLoader


def load_yaml_text(text: str, file: str) -> Any:
    """Parse YAML text; syntax errors become KnowledgeError with file and line."""
    try:
        return yaml.load(text, Loader=_loader_for(file))  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise KnowledgeError(f"not valid YAML: {exc.problem or exc}", file, line) from exc
    except yaml.YAMLError as exc:
        raise KnowledgeError(f"not valid YAML: {exc}", file) from exc


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
