"""The packages are found in the tree, not listed: each room folder installs as
``aitop.<room>`` with every sub-package below it, so a folder added to a room
ships without anyone remembering to name it (the metadata is in pyproject.toml)."""

from setuptools import find_packages, setup

#: The card's top-level folders, each one room of the ``aitop`` namespace.
ROOMS = ("probes", "knowledge", "engine", "tui", "demo")

setup(
    package_dir={f"aitop.{room}": room for room in ROOMS},
    packages=[f"aitop.{room}" + (f".{sub}" if sub else "")
              for room in ROOMS for sub in ("", *find_packages(room))],
)
