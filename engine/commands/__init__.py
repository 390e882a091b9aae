"""One module a command: its arguments (``add_parser``) and its run (``run``).

The dispatcher (:mod:`aitop.engine.cli`) imports these; they import the headless
helpers and the rooms below, never the dispatcher.
"""
