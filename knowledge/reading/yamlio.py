"""Reading knowledge-base YAML safely, remembering where each mapping came from.

Only ``yaml.SafeLoader`` is used (no Python tags, no arbitrary objects). Every
mapping is returned as a :class:`Located` dict that knows its file and line, so
a rule that names an unknown metric fails with ``rules.yaml:42: ...``.

A ``--rules`` file is the user's, not ours, so reading one is bounded: the file
size, the nesting depth and what its aliases expand to are capped before any
Python object is built, and every failure (a non-UTF-8 byte, a number too long
to convert, a date that does not exist) is one ``KnowledgeError`` with file and
line, never a traceback or minutes of work.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

#: Longest message a KnowledgeError prints: it quotes the user's text, which may be huge.
MAX_MESSAGE_CHARS = 500

_BREAKS = re.compile(r"\s*[\r\n]+\s*")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` as one printable line of at most ``limit`` characters.

    Error messages quote the user's file; a newline would make two stderr lines
    and an escape sequence would reach the terminal, so both are neutralised.
    """
    flat = _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", _BREAKS.sub(" ", text))
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


#: Most problems one error lists: a file that is wrong everywhere (the wrong file
#: passed as --rules) should not print thousands of lines.
MAX_PROBLEMS = 50


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong in a knowledge-base file, where it is."""

    message: str
    file: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}: " if self.file and self.line else (
            f"{self.file}: " if self.file else "")
        return f"{where}{self.message}"


class KnowledgeError(ValueError):
    """Knowledge-base files are malformed: every problem found, each ``file:line: ...``.

    As Prometheus' rule checker does, a file is read to its end and every problem
    is reported at once, so fixing a rule file takes one run, not one per mistake.
    ``str()`` is one line per problem; ``message``, ``file`` and ``line`` are the
    first problem's.
    """

    def __init__(self, message: str, file: str | None = None, line: int | None = None) -> None:
        self.problems: tuple[Problem, ...] = (Problem(one_line(message), file, line),)
        super().__init__(str(self.problems[0]))

    @classmethod
    def of(cls, problems: Iterable[Problem]) -> KnowledgeError:
        """One error listing ``problems`` (at least one), at most ``MAX_PROBLEMS`` of them."""
        found = list(problems)
        if not found:
            raise ValueError("a KnowledgeError needs at least one problem")
        error = cls(found[0].message, found[0].file, found[0].line)
        shown = found[:MAX_PROBLEMS]
        if len(found) > MAX_PROBLEMS:
            shown.append(Problem(f"... and {len(found) - MAX_PROBLEMS} more problems",
                                 found[0].file))
        error.problems = tuple(shown)
        error.args = ("\n".join(str(p) for p in shown),)
        return error

    @property
    def message(self) -> str:
        return self.problems[0].message

    @property
    def file(self) -> str | None:
        return self.problems[0].file

    @property
    def line(self) -> int | None:
        return self.problems[0].line

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


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

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """The safe constructor's value, with a bad scalar's error located at its line.

        ``int()`` of a 5,000-digit number or a timestamp for month 13 raise a
        bare ValueError; as a ConstructorError it carries the node's line.
        """
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, OverflowError) as exc:
            # The first clause only: int()'s advice to call sys.set_int_max_str_digits
            # is for programmers, not for the author of a rule file.
            reason = str(exc).split(";")[0]
            raise ConstructorError(
                None, None, f"cannot read this value: {reason}", node.start_mark
            ) from exc


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


#: Largest knowledge-base file read: rule files are a few KB, the packaged
#: documents file about 100 KB. A bigger file is a mistake (or an attack).
MAX_FILE_BYTES = 1 << 20
#: Deepest nesting of mappings and sequences: ours nest 6 deep, and building
#: the objects recurses in Python, which ends near 300 levels.
MAX_DEPTH = 64
#: Most aliases (``*name``) one file may use: sharing a ``source:`` between
#: rules needs a few dozen; a billion-laughs bomb needs them to multiply.
MAX_ALIASES = 200
#: Most work a file's aliases may expand to (a node counts 1, a scalar also its
#: length): twice the largest file without aliases, so only expansion trips it.
MAX_EXPANDED = 2 * MAX_FILE_BYTES


def _check_size(size: int, file: str) -> None:
    """Refuse a file too large to be a knowledge base, before decoding or parsing it."""
    if size > MAX_FILE_BYTES:
        raise KnowledgeError(
            f"file is larger than {MAX_FILE_BYTES // (1 << 20)} MiB; a rule file is a few KB",
            file,
        )


def _children(node: yaml.Node) -> list[tuple[yaml.Node, int]]:
    """A collection node's children, each with the line an alias there is reported at."""
    if isinstance(node, yaml.MappingNode):
        pairs = []
        for key, value in node.value:
            line = key.start_mark.line + 1
            pairs += [(key, line), (value, line)]
        return pairs
    if isinstance(node, yaml.SequenceNode):
        return [(child, node.start_mark.line + 1) for child in node.value]
    return []


#: A node to visit: the node, the line an alias there is reported at, its depth,
#: and (on the second visit, after its children) the children measured.
_Entry = tuple[yaml.Node, int, int, list[tuple[yaml.Node, int]] | None]


class _Budget:
    """What the composed graph expands to, checked node by node (iteratively: no recursion)."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.cost: dict[int, int] = {}
        self.open: set[int] = set()
        self.aliases = 0

    def seen_again(self, node: yaml.Node, line: int) -> bool:
        """True for a node already read (an alias); refuses recursion and too many aliases."""
        key = id(node)
        if key in self.open:
            raise KnowledgeError("an alias refers to the mapping or list it is in", self.file, line)
        if key not in self.cost:
            return False
        self.aliases += 1
        if self.aliases > MAX_ALIASES:
            raise KnowledgeError(f"more than {MAX_ALIASES} aliases (*name)", self.file, line)
        return True

    def finish(self, node: yaml.Node, children: list[tuple[yaml.Node, int]]) -> None:
        """Record the node's expanded cost; refuse it when aliases blew it up."""
        cost = self.cost
        total = 1 + sum(cost[id(child)] for child, _ in children)
        self.open.discard(id(node))
        cost[id(node)] = total
        if total > MAX_EXPANDED:
            raise KnowledgeError(
                f"aliases here expand to more than {MAX_EXPANDED:,} nodes and characters "
                "(an alias bomb?)",
                self.file,
                node.start_mark.line + 1,
            )


def check_graph(root: yaml.Node, file: str) -> None:
    """Refuse deep nesting, recursive aliases and alias bombs before constructing anything.

    The composer shares an anchored node among its aliases, so composing costs
    what the file is long; the cost is in building and walking the values, which
    repeats each alias's whole subtree. Each node's expanded size is summed once
    (post-order, memoised), so even a bomb is measured in time linear in the file.
    """
    budget = _Budget(file)
    stack: list[_Entry] = [(root, root.start_mark.line + 1, 1, None)]
    while stack:
        node, line, depth, children = stack.pop()
        if children is not None:  # every child is measured: the node's turn
            budget.finish(node, children)
        elif budget.seen_again(node, line):
            continue
        elif isinstance(node, yaml.ScalarNode):
            budget.cost[id(node)] = 1 + len(node.value)
        elif depth > MAX_DEPTH:
            raise KnowledgeError(
                f"nested more than {MAX_DEPTH} levels deep", file, node.start_mark.line + 1
            )
        else:
            children = _children(node)
            budget.open.add(id(node))
            stack.append((node, line, depth, children))
            stack += [(child, at, depth + 1, None) for child, at in reversed(children)]


def _line_at(text: str, position: int) -> int:
    """1-based line of a reader error's offset: libyaml counts UTF-8 bytes, PyYAML characters."""
    if _BASE_LOADER is yaml.SafeLoader:
        return text.count("\n", 0, position) + 1
    return text.encode("utf-8", "surrogatepass").count(b"\n", 0, position) + 1


def _reader_error(exc: yaml.reader.ReaderError, text: str, file: str) -> KnowledgeError:
    """A character YAML may not contain, at its line (the error itself gives an offset)."""
    line = _line_at(text, exc.position) if isinstance(exc.position, int) else None
    character = exc.character if isinstance(exc.character, int) else ord(str(exc.character))
    return KnowledgeError(f"not valid YAML: character #x{character:04x}: {exc.reason}", file, line)


def _compose_and_construct(loader: LineLoader, file: str) -> Any:
    """``get_single_data``, with the graph checked between composing and constructing."""
    node = loader.get_single_node()
    if node is None:
        return None
    check_graph(node, file)
    return loader.construct_document(node)


def load_yaml_text(text: str, file: str) -> Any:
    """Parse YAML text safely; errors become KnowledgeError with file and line."""
    _check_size(len(text), file)
    try:
        loader = LineLoader(text)
    except UnicodeError as exc:  # a lone surrogate in text handed to the C parser
        raise KnowledgeError(f"not valid text: {exc}", file) from exc
    loader.file = file
    try:
        return _compose_and_construct(loader, file)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise KnowledgeError(
            f"not valid YAML: {exc.problem or exc.context or exc}", file, line
        ) from exc
    except yaml.reader.ReaderError as exc:
        raise _reader_error(exc, text, file) from exc
    except yaml.YAMLError as exc:
        raise KnowledgeError(f"not valid YAML: {exc}", file) from exc
    except RecursionError as exc:  # the pure-Python composer recurses per level
        raise KnowledgeError(f"nested more than {MAX_DEPTH} levels deep", file) from exc
    finally:
        loader.dispose()


def _decode(data: bytes, file: str) -> str:
    """UTF-8 text, or an error at the line of the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise KnowledgeError(
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} at column {column} "
            "(save the file as UTF-8)",
            file,
            line,
        ) from exc


def load_yaml_file(path: Path) -> Any:
    """Read and parse a knowledge-base file, at most MAX_FILE_BYTES of UTF-8."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)  # never more, whatever the file is
    except OSError as exc:
        raise KnowledgeError(f"cannot read: {exc.strerror}", str(path)) from exc
    _check_size(len(data), str(path))
    return load_yaml_text(_decode(data, str(path)), str(path))
