"""Suites: many real conversations, one decision about an agent (docs/suites.md). A suite is a saved set of
cases, each a point of a real conversation to continue from: `cases` (what a case is, how it is checked and
picked) and `saved` (making, reading, changing, exporting and importing suites).

May import the replay engine's terms, the branches (the turn listing), the frame and kagent's data; never a door.
"""
