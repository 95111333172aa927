"""Settings, read once from the environment by a pure function; a bad value stops start-up."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

if TYPE_CHECKING:  # cryptography is loaded when a key is read, not by every CLI command that reads settings
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

AuthMode = Literal["unsecure", "trusted-proxy"]
# kagent's own tool server as kagent's chart installs it (release `kagent` in namespace `kagent`): the
# RemoteMCPServer `kagent-tool-server` whose spec.url is the kagent-tools Service (helm/kagent/templates/
# toolserver-kagent.yaml). The shipped read-only list counts for this server alone.
KAGENT_TOOL_SERVER = "kagent/kagent-tool-server"
KAGENT_TOOL_SERVER_URL = "http://kagent-tools.kagent:8084/mcp"

PublicKey: TypeAlias = "rsa.RSAPublicKey | ec.EllipticCurvePublicKey"

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")  # fullmatch: `$` would pass a trailing newline


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
    db_connect_timeout_seconds: float = 5.0  # a database that accepts but never answers fails this fast
    # The longest any request or job waits for a pooled connection (or a keyed start for its key's lock):
    # past it a request answers 503 with Retry-After, so that no burst stalls the service (docs/reliability.md).
    db_pool_wait_seconds: float = 10.0
    idempotency_ttl_seconds: int = 24 * 3600
    # What answers made whole before their first byte (transcripts, any over 64 KiB) may hold in all, per process,
    # while they wait for their readers: memory, then temporary files, then 503 with Retry-After (reliability.md).
    response_memory_bytes: int = 64 * 1024 * 1024
    response_disk_bytes: int = 1024 * 1024 * 1024
    embedded_data_dir: str = ".kagent-fork/pgdata"
    otel_tracing_enabled: bool = False
    # Optional verification of the bearer JWT in trusted-proxy mode (kagent itself trusts the proxy).
    jwt_secret: str | None = None  # HS256 shared secret
    jwt_public_key: str | None = None  # PEM of an RSA (RS256) or P-256 (ES256) public key
    jwt_audience: str | None = None
    # Limits: 0 turns a limit off.
    max_fork_events: int = 250_000  # events one synchronous fork may copy (422 beyond)
    fork_rate_per_minute: int = 0  # forks per user per minute, across replicas (429 beyond)
    # Sessions with at least this many live tasks get a turn map (docs/turn-map.md); None: no map.
    turn_map_min_tasks: int | None = 200
    # A per_task fork of a mapped session is given its source's map cut at the boundary, in the fork's
    # transaction (docs/turn-map.md, "A fork's map"): the fork's first listing is a read of the map instead of
    # a build (at 100,000 events 6 s -> 44 ms), but the fork writes the map's rows (+11-25 %). Off: the fork
    # stays within its target of 1.4x PostgreSQL's copy, and its map is built on its first ask.
    turn_map_fork_copy: bool = False
    # What-if: kagent's A2A endpoint (None: what-ifs answer 503), the cost gate, the time limit, and
    # how often a running job's replica says it is alive (a job silent for 3 beats is taken over).
    kagent_a2a_url: str | None = None
    whatif_max_context_tokens: int = 200_000
    whatif_timeout_seconds: int = 600
    whatif_heartbeat_seconds: float = 5.0
    whatif_max_parallel: int = 4  # A2A turns with agents at once per replica (the rest wait)
    # The key of the MCP Apps' app tokens (docs/mcp-apps.md); required for them in trusted-proxy mode.
    mcp_app_secret: str | None = None
    # The arms' tools (docs/whatif.md, "What an arm's tools do"): the externally reachable base URL of this
    # service's replay MCP endpoint (an arm whose every MCP server is under it is a replay twin; None: no arm is
    # one), and the operator's word on which tools only read, per server (a server is its address as agents'
    # configurations name it): REPLAY_READ_ONLY_TOOLS's (server, tool) pairs, `default` standing for the shipped
    # list on kagent's own tool server; REPLAY_TRUSTED_SERVERS, whose readOnlyHint counts; REPLAY_SERVER_NAMES,
    # the addresses of RemoteMCPServers named namespace/name in the other two (kagent's controller writes a
    # server's address into an agent's configuration, never its name).
    replay_mcp_url: str | None = None
    replay_read_only_tools: tuple[tuple[str, str], ...] = (("default", ""),)
    replay_trusted_servers: tuple[str, ...] = ()
    replay_server_names: tuple[tuple[str, str], ...] = ((KAGENT_TOOL_SERVER, KAGENT_TOOL_SERVER_URL),)


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
    if not _SCHEMA_NAME.fullmatch(schema):
        raise ConfigError(f"KAGENT_FORK_SCHEMA must be a lower-case SQL identifier, got {schema!r}")
    # kagent's own name for the setting first, so one value configures both services
    claim = env.get("AUTH_USER_ID_CLAIM") or env.get("USER_ID_CLAIM") or "sub"
    pool_min = _int(env, "DB_POOL_MIN_SIZE", 1, minimum=0, maximum=1000)
    pool_max = _int(env, "DB_POOL_MAX_SIZE", 10, minimum=1, maximum=1000)
    if pool_min > pool_max:
        raise ConfigError(f"DB_POOL_MIN_SIZE ({pool_min}) must not exceed DB_POOL_MAX_SIZE ({pool_max})")
    jwt_secret = env.get("JWT_SECRET") or None
    jwt_public_key = (env.get("JWT_PUBLIC_KEY") or "").replace("\\n", "\n").strip() or None
    if (jwt_secret or jwt_public_key) and auth_mode != "trusted-proxy":
        raise ConfigError("JWT_SECRET and JWT_PUBLIC_KEY verify bearer tokens: they need AUTH_MODE=trusted-proxy")
    if jwt_secret is not None and len(jwt_secret.encode()) < 32:
        raise ConfigError("JWT_SECRET must be at least 32 bytes (RFC 7518: an HS256 key as long as the hash)")
    if jwt_public_key is not None:
        public_key_algorithm(jwt_public_key)
    if env.get("JWT_AUDIENCE") and not (jwt_secret or jwt_public_key):
        raise ConfigError("JWT_AUDIENCE is checked only in verified tokens: set JWT_SECRET or JWT_PUBLIC_KEY too")
    mcp_app_secret = env.get("MCP_APP_SECRET") or None
    if mcp_app_secret is not None and len(mcp_app_secret.encode()) < 32:
        raise ConfigError("MCP_APP_SECRET must be at least 32 bytes (the HMAC key of the MCP Apps' app tokens)")
    tracing = (env.get("OTEL_TRACING_ENABLED") or "false").strip().lower()
    if tracing not in ("true", "false"):
        raise ConfigError(f"OTEL_TRACING_ENABLED must be 'true' or 'false', got {tracing!r}")
    return Settings(
        database_url=_database_url(env),
        otel_tracing_enabled=tracing == "true",
        service_schema=schema,
        auth_mode="trusted-proxy" if auth_mode == "trusted-proxy" else "unsecure",
        user_id_claim=claim,
        max_fork_depth=_int(env, "MAX_FORK_DEPTH", 32, minimum=1, maximum=10_000),
        max_body_bytes=_int(env, "MAX_BODY_BYTES", 1024 * 1024, minimum=1024, maximum=1 << 30),
        pool_min_size=pool_min,
        pool_max_size=pool_max,
        db_pool_wait_seconds=_int(env, "DB_POOL_WAIT_SECONDS", 10, minimum=1, maximum=600),
        db_connect_timeout_seconds=_int(env, "DB_CONNECT_TIMEOUT_SECONDS", 5, minimum=1, maximum=600),
        idempotency_ttl_seconds=_int(env, "IDEMPOTENCY_TTL_SECONDS", 24 * 3600, minimum=60, maximum=1 << 31),
        response_memory_bytes=_int(env, "RESPONSE_MEMORY_BYTES", 64 * 1024 * 1024, minimum=0, maximum=1 << 40),
        response_disk_bytes=_int(env, "RESPONSE_DISK_BYTES", 1024 * 1024 * 1024, minimum=0, maximum=1 << 50),
        embedded_data_dir=env.get("KAGENT_FORK_DATA_DIR", ".kagent-fork/pgdata") or ".kagent-fork/pgdata",
        jwt_secret=jwt_secret,
        jwt_public_key=jwt_public_key,
        jwt_audience=env.get("JWT_AUDIENCE") or None,
        max_fork_events=_int(env, "MAX_FORK_EVENTS", 250_000, minimum=0, maximum=1 << 31),
        fork_rate_per_minute=_int(env, "FORK_RATE_PER_MINUTE", 0, minimum=0, maximum=1_000_000),
        turn_map_min_tasks=None
        if env.get("TURN_MAP_MIN_TASKS") == "off"
        else _int(env, "TURN_MAP_MIN_TASKS", 200, minimum=0, maximum=1 << 31),
        turn_map_fork_copy=_switch(env, "TURN_MAP_FORK_COPY", False),
        kagent_a2a_url=_a2a_url(env.get("KAGENT_A2A_URL") or None),
        whatif_max_context_tokens=_int(env, "WHATIF_MAX_CONTEXT_TOKENS", 200_000, minimum=1, maximum=1 << 31),
        whatif_timeout_seconds=_int(env, "WHATIF_TIMEOUT_SECONDS", 600, minimum=1, maximum=7 * 24 * 3600),
        whatif_max_parallel=_int(env, "WHATIF_MAX_PARALLEL", 4, minimum=1, maximum=1000),
        mcp_app_secret=mcp_app_secret,
        replay_mcp_url=_http_url("REPLAY_MCP_URL", env.get("REPLAY_MCP_URL") or None),
        **_replay_servers(env),
    )


def _database_url(env: Mapping[str, str]) -> str | None:
    """DATABASE_URL_FILE, a file holding the URL (a mounted Secret, so that the password is in no pod spec), wins
    over DATABASE_URL, as kagent's POSTGRES_DATABASE_URL_FILE wins over POSTGRES_DATABASE_URL: one Secret serves
    both. Read here, once, like every setting, so that a bad path stops start-up with the variable named."""
    path = env.get("DATABASE_URL_FILE")
    if not path:
        return env.get("DATABASE_URL") or None
    try:
        with open(path, encoding="utf-8") as file:
            url = file.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"DATABASE_URL_FILE {path!r} cannot be read: {type(exc).__name__}") from None
    if not url:
        raise ConfigError(f"DATABASE_URL_FILE {path!r} is empty")
    return url


def _switch(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if not raw:
        return default
    if raw not in ("on", "off"):
        raise ConfigError(f"{name} must be 'on' or 'off', got {raw!r}")
    return raw == "on"


def _a2a_url(raw: str | None) -> str | None:
    if raw is None:
        return None
    if not raw.startswith(("http://", "https://")):
        raise ConfigError(
            f"KAGENT_A2A_URL must be an http(s) URL such as http://kagent-controller.kagent:8083/api/a2a, got {raw!r}"
        )
    return raw.rstrip("/")


def _http_url(name: str, raw: str | None) -> str | None:
    if raw is None:
        return None
    if not raw.startswith(("http://", "https://")):
        raise ConfigError(f"{name} must be an http(s) URL, got {raw!r}")
    return raw.rstrip("/")


_TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")  # fullmatch
_REF = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?")  # a resource's namespace/name


def _words(raw: str | None) -> list[str]:
    return [w for w in re.split(r"[,\s]+", raw or "") if w]


def _replay_servers(env: Mapping[str, str]) -> dict[str, Any]:
    """REPLAY_SERVER_NAMES (`namespace/name=URL`, ...), REPLAY_TRUSTED_SERVERS (servers) and REPLAY_READ_ONLY_TOOLS
    (`server/tool`, `default` for the shipped list on kagent's tool server, `none` alone for nothing), a server
    being its URL or a namespace/name REPLAY_SERVER_NAMES gives the address of. Each names a server, never a tool
    name alone: a name means nothing on another server."""
    names = {KAGENT_TOOL_SERVER: KAGENT_TOOL_SERVER_URL}
    for word in _words(env.get("REPLAY_SERVER_NAMES")):
        ref, _, url = word.partition("=")
        if not _REF.fullmatch(ref) or not url.startswith(("http://", "https://")):
            raise ConfigError(
                f"REPLAY_SERVER_NAMES must be namespace/name=URL entries separated by commas, got {word!r}"
            )
        names[ref] = url.rstrip("/")

    def server(word: str, setting: str) -> str:
        if word.startswith(("http://", "https://")):
            return word.rstrip("/")
        if word in names:
            return names[word]
        raise ConfigError(
            f"{setting}: {word!r} is neither a server's URL nor a RemoteMCPServer REPLAY_SERVER_NAMES gives the "
            "address of (namespace/name=URL: agents' configurations name a server by its address alone)"
        )

    trusted = tuple(
        dict.fromkeys(server(w, "REPLAY_TRUSTED_SERVERS") for w in _words(env.get("REPLAY_TRUSTED_SERVERS")))
    )
    words = _words(env.get("REPLAY_READ_ONLY_TOOLS")) or ["default"]
    pairs: list[tuple[str, str]] = []
    for word in [] if words == ["none"] else words:
        where, _, tool = word.rpartition("/")
        if word == "default":
            pairs.append(("default", ""))
            continue
        if not where or not _TOOL_NAME.fullmatch(tool):
            raise ConfigError(
                "REPLAY_READ_ONLY_TOOLS must be server/tool entries separated by commas (a server's URL or "
                f"namespace/name, then the tool; 'default' for the shipped list, 'none' alone for nothing), got "
                f"{word!r}"
            )
        pairs.append((server(where, "REPLAY_READ_ONLY_TOOLS"), tool))
    return {
        "replay_read_only_tools": tuple(dict.fromkeys(pairs)), "replay_trusted_servers": trusted,
        "replay_server_names": tuple(names.items()),
    }  # fmt: skip


@functools.lru_cache(maxsize=8)
def public_key_algorithm(pem: str) -> tuple[PublicKey, str]:
    """The key of JWT_PUBLIC_KEY and the one algorithm it verifies: RS256 (RSA) or ES256 (P-256)."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    try:
        key = serialization.load_pem_public_key(pem.encode())
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise ConfigError(f"JWT_PUBLIC_KEY is not a PEM public key: {exc}") from None
    if isinstance(key, rsa.RSAPublicKey):
        if key.key_size < 2048:
            raise ConfigError(f"JWT_PUBLIC_KEY is an RSA key of {key.key_size} bits; at least 2048 are needed")
        return key, "RS256"
    if isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
        return key, "ES256"
    raise ConfigError("JWT_PUBLIC_KEY must be an RSA key (RS256) or an EC P-256 key (ES256)")
