"""Suites: many real conversations, one decision about an agent (docs/suites.md). A suite is a saved set of
cases, each a point of a real conversation to continue from (cases.py)."""
