"""kagent-fork: fork and rewind kagent conversations on kagent's own PostgreSQL database."""

__version__ = "0.1.0"
