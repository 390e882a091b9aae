"""Helpers shared by every layer of the suite: jobs, fakes, sessions, processes."""
