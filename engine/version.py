"""aitop's own version, as installed (reports and snapshots record it)."""

from __future__ import annotations

from importlib import metadata


def aitop_version() -> str | None:
    """The installed aitop's version, or ``None`` when running from a bare checkout."""
    try:
        return metadata.version("aitop")
    except metadata.PackageNotFoundError:
        return None
