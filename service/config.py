"""Settings, read once from the environment by a pure function; a bad value stops start-up."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

AuthMode = Literal["unsecure", "trusted-proxy"]

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class ConfigError(ValueError):
    """A setting has a value the service cannot run with."""


@dataclass(frozen=True, kw_only=True)
class Settings:
    database_url: str | None = None
    service_schema: str = "kagent_fork"
    auth_mode: AuthMode = "unsecure"
    user_id_claim: str = "sub"
    max_fork_depth: int = 32
    max_body_bytes: int = 1024 * 1024
    pool_min_size: int = 1
    pool_max_size: int = 10
    idempotency_ttl_seconds: int = 24 * 3600
    embedded_data_dir: str = ".kagent-fork/pgdata"


def _int(env: Mapping[str, str], name: str, default: int, *, minimum: int, maximum: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {raw!r}") from None
    if not minimum <= value <= maximum:
        raise ConfigError(f"{name} must be between {minimum} and {maximum}, got {value}")
    return value


def from_env(env: Mapping[str, str]) -> Settings:
    """Build Settings from environment variables; raise ConfigError naming the bad variable."""
    auth_mode = env.get("AUTH_MODE", "unsecure") or "unsecure"
    if auth_mode not in ("unsecure", "trusted-proxy"):
        raise ConfigError(f"AUTH_MODE must be 'unsecure' or 'trusted-proxy', got {auth_mode!r}")
    schema = env.get("KAGENT_FORK_SCHEMA", "kagent_fork") or "kagent_fork"
    if not _SCHEMA_NAME.match(schema):
        raise ConfigError(f"KAGENT_FORK_SCHEMA must be a lower-case SQL identifier, got {schema!r}")
    claim = env.get("USER_ID_CLAIM", "sub") or "sub"
    pool_min = _int(env, "DB_POOL_MIN_SIZE", 1, minimum=0, maximum=1000)
    pool_max = _int(env, "DB_POOL_MAX_SIZE", 10, minimum=1, maximum=1000)
    if pool_min > pool_max:
        raise ConfigError(f"DB_POOL_MIN_SIZE ({pool_min}) must not exceed DB_POOL_MAX_SIZE ({pool_max})")
    return Settings(
        database_url=env.get("DATABASE_URL") or None,
        service_schema=schema,
        auth_mode="trusted-proxy" if auth_mode == "trusted-proxy" else "unsecure",
        user_id_claim=claim,
        max_fork_depth=_int(env, "MAX_FORK_DEPTH", 32, minimum=1, maximum=10_000),
        max_body_bytes=_int(env, "MAX_BODY_BYTES", 1024 * 1024, minimum=1024, maximum=1 << 30),
        pool_min_size=pool_min,
        pool_max_size=pool_max,
        idempotency_ttl_seconds=_int(env, "IDEMPOTENCY_TTL_SECONDS", 24 * 3600, minimum=60, maximum=1 << 31),
        embedded_data_dir=env.get("KAGENT_FORK_DATA_DIR", ".kagent-fork/pgdata") or ".kagent-fork/pgdata",
    )
