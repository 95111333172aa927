"""Who is calling, resolved as kagent's backend does (go/core/internal/httpserver/auth), stricter where noted.

- unsecure: the `user_id` query parameter, else `X-User-Id`, else `admin@kagent.dev`.
- trusted-proxy: `Authorization: Bearer <JWT>` is required; the user is a claim (default `sub`, with
  `sub` as fallback), decoded without verifying the signature: the proxy in front has verified it.
  Beyond kagent, JWT_SECRET (HS256) and/or JWT_PUBLIC_KEY (RS256/ES256) make the service verify the
  signature, `exp`/`nbf` and, with JWT_AUDIENCE, `aud` itself: a token that fails is 401.
  Agent calls (`X-Agent-Name`) name the user with `user_id` / `X-User-Id`, else the token's `sub`, but,
  stricter than kagent, only with an agent's token: a Kubernetes service account's, of the agent's namespace
  where the request names it (403 otherwise). A user's token with `X-Agent-Name` is that user.
- `user_id` or `X-User-Id` present and empty names no one: 400 in both modes (kagent takes the default user).
- `X-Share-Token` lets the caller act on the share's session as its owner (read-only or not).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import msgspec

from service.config import PublicKey, Settings, public_key_algorithm
from service.errors import BadRequest, Forbidden, NotFound, Unauthorized
from service.kagent import frameworks
from service.kagent.store.agents import AGENT_REF, agent_ref_of
from service.kagent.store.base import Connection
from service.kagent.store.sessions import SessionRow, Share
from service.services import Services

DEFAULT_USER = "admin@kagent.dev"
JWT_LEEWAY_SECONDS = 30  # clock skew tolerated between the token's issuer and this service
_SINGLE_HEADERS = ("authorization", "x-user-id", "x-share-token", "x-agent-name", "idempotency-key")


def scope_headers(scope: Mapping[str, object]) -> dict[str, list[str]]:
    """Headers from a request's raw ASGI scope: a header sent twice must be seen twice, not joined into
    one. Values are read as UTF-8, as kagent's Go backend takes their bytes (a user id `zoë` must match
    the rows it wrote); bytes that are not UTF-8 are kept as lone surrogates, which no stored id holds and
    which an identity header refuses (400, _checked): read as Latin-1, `zo\xeb` would have been `zoë`."""
    headers: dict[str, list[str]] = {}
    raw: Sequence[tuple[bytes, bytes]] = scope["headers"]  # type: ignore[assignment]
    for raw_name, raw_value in raw:
        value = raw_value.decode("utf-8", "surrogateescape")
        headers.setdefault(raw_name.decode("latin-1").lower(), []).append(value)
    return headers


@dataclass(frozen=True, kw_only=True)
class Caller:
    user_id: str
    share_token: str | None = None
    # Whose sessions this caller reads, never given by a request: a suite run's own user reads its creator's
    # conversations (and writes its branches under its own id), its creator reads a run's branch to keep it.
    reads_as: str | None = None


@dataclass(frozen=True, kw_only=True)
class Access:
    """What the caller may do with one session: whose rows it is, and whether writes are allowed."""

    owner: str
    read_only: bool
    via_share: bool


def _one(headers: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = headers.get(name, ())
    if len(values) > 1:
        raise BadRequest(f"header {name} must be given once, got {len(values)}")
    return values[0] if values else None


def _claims(token: str) -> dict[str, object]:
    parts = token.split(".")
    if len(parts) != 3:
        raise Unauthorized("unauthenticated: the bearer token is not a JWT")
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = msgspec.json.decode(base64.urlsafe_b64decode(payload.encode("ascii")))
    except (binascii.Error, ValueError, UnicodeEncodeError, msgspec.DecodeError):
        raise Unauthorized("unauthenticated: the bearer token's claims cannot be read") from None
    if not isinstance(claims, dict):
        raise Unauthorized("unauthenticated: the bearer token's claims are not an object")
    return claims


def _verified_claims(settings: Settings, token: str) -> dict[str, object]:
    """The claims of a token whose signature and times check out with the configured key."""
    import jwt  # only with JWT_SECRET or JWT_PUBLIC_KEY set: a CLI command never verifies a token

    try:
        algorithm = jwt.get_unverified_header(token).get("alg")
    except jwt.InvalidTokenError:
        raise Unauthorized("unauthenticated: the bearer token is not a JWT") from None
    # The key is chosen by the configured algorithm, never by the token alone (no alg confusion, no "none").
    key: str | PublicKey
    if algorithm == "HS256" and settings.jwt_secret:
        key = settings.jwt_secret
    elif settings.jwt_public_key and algorithm == public_key_algorithm(settings.jwt_public_key)[1]:
        key = public_key_algorithm(settings.jwt_public_key)[0]
    else:
        raise Unauthorized(f"unauthenticated: bearer tokens signed with {algorithm!r} are not accepted")
    try:
        claims: dict[str, object] = jwt.decode(
            token,
            key,
            algorithms=[str(algorithm)],
            audience=settings.jwt_audience,
            options={"verify_aud": settings.jwt_audience is not None},
            leeway=JWT_LEEWAY_SECONDS,
        )
    except jwt.ExpiredSignatureError:
        raise Unauthorized("unauthenticated: the bearer token has expired") from None
    except jwt.InvalidSignatureError:
        raise Unauthorized("unauthenticated: the bearer token's signature is not valid") from None
    except jwt.InvalidTokenError as exc:
        raise Unauthorized(f"unauthenticated: the bearer token is not valid ({exc})") from None
    return claims


def _checked(user_id: str, source: str) -> str:
    if len(user_id) > 256 or "\x00" in user_id:
        raise BadRequest(f"{source} must be at most 256 characters without NUL")
    if _NOT_UTF8.search(user_id):
        raise BadRequest(f"{source} is not valid UTF-8")
    return user_id


_NOT_UTF8 = re.compile("[\ud800-\udfff]")  # bytes that were not UTF-8 (scope_headers)


def _explicit_user(headers: Mapping[str, Sequence[str]], query: Mapping[str, Sequence[str]]) -> str | None:
    """The user the request names itself: `user_id`, else `X-User-Id` (kagent's order). kagent reads an empty
    one as absent, so `X-User-Id:` was the default user; present and empty, it names no one: 400."""
    query_values = query.get("user_id", ())
    if len(query_values) > 1:
        raise BadRequest("query parameter user_id must be given once")
    named = [(query_values[0] if query_values else None, "query parameter user_id")]
    named.append((_one(headers, "x-user-id"), "header X-User-Id"))
    for value, where in named:
        if value == "":
            raise BadRequest(f"{where} is empty: it names no user (leave it out instead)")
    return next((value for value, _ in named if value is not None), None)


# A Kubernetes service account's token (an agent's, kagent's runtimes send it) has the `sub`
# system:serviceaccount:<namespace>:<name>, the namespace a DNS label.
_SERVICE_ACCOUNT = re.compile(r"system:serviceaccount:([a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?):[^:]+")


def _account_namespace(claims: Mapping[str, object]) -> str | None:
    """The namespace of a service account's token; None for any other token (a user's). Where the token says
    its namespace again (a projected token's `kubernetes.io` claim, an older secret token's
    `kubernetes.io/serviceaccount/namespace`), a token that says two namespaces is refused."""
    subject = claims.get("sub")
    found = _SERVICE_ACCOUNT.fullmatch(subject) if isinstance(subject, str) else None
    if found is None:
        return None
    projected = claims.get("kubernetes.io")
    said = [projected.get("namespace") if isinstance(projected, dict) else None]
    said.append(claims.get("kubernetes.io/serviceaccount/namespace"))
    if any(other is not None and other != found.group(1) for other in said):
        raise Unauthorized("unauthenticated: the service account token names two namespaces")
    return found.group(1)


def _agent_namespace(agent: str | None) -> str | None:
    """The namespace an agent's name says: `namespace/name`, or kagent's `namespace__NS__name` (the app name its
    runtimes send as X-Agent-Name); None for a bare name (an agent card's) or none."""
    if agent is None:
        return None
    ref = agent if AGENT_REF.fullmatch(agent) else agent_ref_of(agent)
    return ref.split("/", 1)[0] if ref else None


def resolve_caller(
    settings: Settings,
    headers: Mapping[str, Sequence[str]],
    query: Mapping[str, Sequence[str]],
    *,
    agent: str | None = None,
) -> Caller:
    """The calling user. `headers` maps lower-case names to all their values; `agent` is the agent
    (namespace/name) the request's path names, if it names one (the replay endpoint's)."""
    for name in _SINGLE_HEADERS:
        _one(headers, name)
    explicit = _explicit_user(headers, query)
    share_token = _one(headers, "x-share-token") or None
    if share_token is not None:
        _checked(share_token, "X-Share-Token")

    if settings.auth_mode == "unsecure":
        return Caller(user_id=_checked(explicit or DEFAULT_USER, "user id"), share_token=share_token)

    authorization = _one(headers, "authorization") or ""
    if not authorization.startswith("Bearer "):
        raise Unauthorized("unauthenticated: missing or invalid Authorization header")
    token = authorization.removeprefix("Bearer ").strip()
    claims = _verified_claims(settings, token) if settings.jwt_secret or settings.jwt_public_key else _claims(token)
    agent_name = _one(headers, "x-agent-name")
    account = _account_namespace(claims) if agent_name else None
    if agent_name and account is not None:
        # Only an agent's own token may name the user it acts for (kagent lets any token do it).
        for namespace in (_agent_namespace(agent_name), _agent_namespace(agent)):
            if namespace is not None and namespace != account:
                raise Forbidden(
                    f"the bearer token is a service account of namespace {account!r}, the agent is in {namespace!r}:"
                    " an agent acts for a user only with a token of its own namespace"
                )
        user = explicit or claims.get("sub")
    else:
        user = claims.get(settings.user_id_claim)
        if not user and settings.user_id_claim != "sub":
            user = claims.get("sub")
    if not isinstance(user, str) or not user:
        raise Unauthorized("unauthenticated: the bearer token names no user")
    return Caller(user_id=_checked(user, "user id"), share_token=share_token)


def access_for(caller: Caller, session_id: str, share: Share | None) -> Access:
    """Whose session `session_id` is for this caller. A share of another session does not apply
    (kagent falls back to the caller's own sessions); an unknown token is refused."""
    if caller.share_token is None and caller.reads_as is not None:
        return Access(owner=caller.reads_as, read_only=True, via_share=False)
    if caller.share_token is None:
        return Access(owner=caller.user_id, read_only=False, via_share=False)
    if share is None:
        raise Forbidden("Invalid or expired share token")
    if share.session_id != session_id:
        return Access(owner=caller.user_id, read_only=False, via_share=False)
    return Access(owner=share.owner, read_only=share.read_only, via_share=True)


async def resolve_access(svc: Services, conn: Connection, caller: Caller, session_id: str) -> Access:
    share = None
    if caller.share_token is not None:
        share = await svc.store.sessions.share_by_token(conn, caller.share_token)
    return access_for(caller, session_id, share)


async def visible_session(
    svc: Services, conn: Connection, caller: Caller, session_id: str, *, lock: bool = False
) -> tuple[SessionRow, Access]:
    """The session as the caller may see it; 404 alike for missing and not visible."""
    access = await resolve_access(svc, conn, caller, session_id)
    row = await svc.store.sessions.get_session(conn, session_id, access.owner, lock=lock)
    if row is None:
        raise NotFound("Session not found")
    return row, access


@dataclass(frozen=True, kw_only=True)
class Seen:
    """A session's access, settled once at an operation's door (settle): the session row as the caller may see
    it, who may read and write it, whose rows of it are the owner's, and its framework. The operation's rooms take
    it instead of a session id and a caller, and none of them asks again."""

    caller: Caller
    row: SessionRow
    access: Access
    users: tuple[str, ...]  # the users whose rows of the session are its owner's (frameworks.runtime_users)
    framework: frameworks.Framework
    checkpoints: bool  # LangGraph checkpoints of it in kagent's database (the framework's first signal)

    @property
    def owner(self) -> str:
        return self.row.user_id


async def settle(svc: Services, conn: Connection, caller: Caller, session_id: str, *, lock: bool = False) -> Seen:
    """The session's access for one operation (Seen): the share token's, the session row's, the ownership of the
    rows under kagent's default user and the framework's queries, each run once. 404 alike for missing and not
    visible; `lock`: the session row locked (in the caller's transaction)."""
    row, access = await visible_session(svc, conn, caller, session_id, lock=lock)
    users = await frameworks.runtime_users(svc.store, conn, row.id, row.user_id)
    signals = await svc.store.sessions.framework_signals(conn, row.id, users)
    return Seen(
        caller=caller, row=row, access=access, users=tuple(users), framework=frameworks.decide(*signals),
        checkpoints=signals[0],
    )  # fmt: skip
