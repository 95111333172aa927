"""kagent-fork: fork and rewind kagent conversations on kagent's own PostgreSQL database.

The frame lives here at the top (settings, identity, wire types, errors, metrics, tracing, `Services`);
`app.py` puts the house together. Packages, top to bottom: doors, agents, branches, operations, then the frame,
then kagent's data (see docs/design.md, "The map"). Imports run down only (tests/test_layers.py).
"""

__version__ = "0.1.0"
