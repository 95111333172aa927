"""The embedded PostgreSQL (when no DATABASE_URL is given) and the demo conversations it starts with.

May import kagent's data; used only by the CLI's `serve` and the tests.
"""
