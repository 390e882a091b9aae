"""Finding passages in the two source documents' own text.

Every citation in the knowledge base quotes a document verbatim under one of its
headings. The documents are plain text (``sources/*.txt``), so their outline is
recognised by the shape of their lines, and a quote is looked up with whitespace
normalised (the documents' tables use tabs).
"""

from __future__ import annotations

import functools
import importlib.resources

from .documents import KnowledgeDocuments

_PACKAGE = "aitop.knowledge"


def source_text(document_id: str, documents: KnowledgeDocuments) -> str:
    """The full text of a source document, read from the packaged ``sources/`` folder.

    ``KeyError`` for an unknown document id. (The ``sources/*.txt`` files must be
    listed in the package data for installed, non-editable copies.)
    """
    file = documents.document(document_id).file
    return _read_source(file)


@functools.lru_cache(maxsize=8)
def _read_source(file: str) -> str:
    return (importlib.resources.files(_PACKAGE) / "sources" / file).read_text(encoding="utf-8")


def normalize(text: str) -> str:
    """Collapse every run of whitespace to one space: the documents' tables use tabs."""
    return " ".join(text.split())


def _is_heading(line: str) -> bool:
    """A heading is a short stand-alone line that is not a sentence, list item or table row.

    The documents are plain text, so their headings are recognised by shape:
    paragraphs end with '.', lead-ins ("Practical Memory Management Steps:") with
    ':', list items start with a bullet, and table rows contain tabs.
    """
    s = line.strip()
    return (
        bool(s)
        and "\t" not in line
        and not s.startswith("•")
        and s[-1] not in ".:"
        and len(s.split()) <= 15
    )


@functools.lru_cache(maxsize=8)
def _outline(text: str) -> tuple[str, tuple[tuple[int, str], ...]]:
    """The normalised text and (offset, heading) of every heading in it."""
    parts: list[str] = []
    marks: list[tuple[int, str]] = []
    offset = 0
    for line in text.splitlines():
        norm = normalize(line)
        if not norm:
            continue
        if _is_heading(line):
            marks.append((offset, norm))
        parts.append(norm)
        offset += len(norm) + 1
    return " ".join(parts), tuple(marks)


def headings(document_id: str, documents: KnowledgeDocuments) -> tuple[str, ...]:
    """The headings of a document, in order (what a ``source.section`` may be)."""
    return tuple(h for _, h in _outline(source_text(document_id, documents))[1])


def _section_at(marks: tuple[tuple[int, str], ...], offset: int) -> str:
    section = ""
    for start, heading in marks:
        if start > offset:
            break
        section = heading
    return section


def sections_containing(
    document_id: str, quote: str, documents: KnowledgeDocuments
) -> tuple[str, ...]:
    """Every section of a document in which ``quote`` occurs (whitespace-normalised)."""
    norm_text, marks = _outline(source_text(document_id, documents))
    needle = normalize(quote)
    if not needle:
        return ()
    found: list[str] = []
    start = norm_text.find(needle)
    while start != -1:
        section = _section_at(marks, start)
        if section not in found:
            found.append(section)
        start = norm_text.find(needle, start + 1)
    return tuple(found)


def find_passage(quote: str, documents: KnowledgeDocuments) -> tuple[str, str] | None:
    """``(document id, section)`` of the first place ``quote`` occurs, or ``None``.

    For the UI's "source passage" display: given a quote, say where it comes from.
    """
    for doc in documents.documents:
        sections = sections_containing(doc.id, quote, documents)
        if sections:
            return doc.id, sections[0]
    return None


def verify_sources(documents: KnowledgeDocuments) -> list[str]:
    """Problems with the file's citations: quotes not verbatim, or under another heading.

    Kept out of loading so that loading does not depend on the source texts;
    tests and CI call this to keep every citation honest.
    """
    problems: list[str] = []
    for where, ref in documents.source_refs():
        sections = sections_containing(ref.document, ref.quote, documents)
        if not sections:
            problems.append(f"{where}: quote is not verbatim in {ref.document}: {ref.quote!r}")
        elif ref.section not in sections:
            problems.append(
                f"{where}: quote is under {' / '.join(map(repr, sections))}, not {ref.section!r}"
            )
    return problems
