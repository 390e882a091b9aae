"""The whole suite's configuration: the layers below (``unit/``, ``attach/``, ``tui/``,
``cli/``, ``browser/``, ``quality/``) say what their tests need and cost; shared helpers live in
the ``support`` package, and the rules every test keeps in ``support.suite_rules``.
"""

pytest_plugins = ["support.suite_rules"]
