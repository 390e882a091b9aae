"""What every command that attaches or replays shares, UI or not.

``options`` turns the command line into attach options and a started source,
``report`` builds the typed report of a source at a point in time, ``export``
writes a session's snapshot with its companions (and retries, for the UI), and
``run`` is the headless run itself. The commands sit above this room; the
records, reports and comparison rooms below it.
"""
