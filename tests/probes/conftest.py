"""Fixtures for the probe tests live in probe_data.py (a unique module name: two test folders
both importing a module called `conftest` would shadow each other)."""

from probe_data import *  # noqa: F401,F403
