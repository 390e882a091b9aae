"""aitop's own version, as installed: the environment probe records it beside the
target's versions, and every report, snapshot and exporter says which aitop wrote it.

The distribution is ``torch-aitop``: on the Python package index the name
``aitop`` belongs to another project (an "AI/ML system monitor"), so
``pip install aitop`` gets that one. The import package and the command stay
``aitop``.
"""

from __future__ import annotations

import functools

#: The name aitop is installed under (``pip install torch-aitop``).
DISTRIBUTION = "torch-aitop"


@functools.cache
def aitop_version() -> str | None:
    """The installed aitop's version, or ``None`` when running from a bare checkout.

    Looked up once per process: the lookup scans ``sys.path`` for the
    distribution's metadata, and the exporter asks on every scrape. Its module
    is imported here, when first asked (on the environment probe's thread), not
    on the way to the first frame (docs/benchmarks.md, Where aitop's CPU goes).
    """
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
