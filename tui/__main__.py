"""``python -m aitop.tui``: the same as the ``aitop`` command."""

from aitop.tui.entry import main

raise SystemExit(main())
