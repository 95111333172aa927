"""The explorer page (GET /ui/): static files of the package, and the one call of its own, the
caller's sessions to pick from. Everything else the page does goes through the HTTP API itself."""

from __future__ import annotations

from pathlib import Path

import msgspec

from service.errors import BadRequest
from service.identity import Caller, access_for
from service.kagent.store.agents import agent_ref_of
from service.schemas import Session, session_json
from service.services import Services

MAX_SESSIONS = 500
UI_DIR = Path(__file__).resolve().parent / "ui"
# Litestar adds "; charset=utf-8" to every text/* type itself (naming it here too said it twice).
FILES = {
    "index.html": "text/html",
    "app.js": "text/javascript",
    "experiments.js": "text/javascript",
    "suites.js": "text/javascript",
    "tools.js": "text/javascript",
    "style.css": "text/css",
}


MAX_AGENTS = 500


class KnownAgent(msgspec.Struct, frozen=True, kw_only=True):
    """An agent kagent knows (its `agent` table), as the page offers it to pick: namespace/name, kagent's type, and
    the model its configuration names (null: none, as a BYO agent's)."""

    agent_ref: str
    type: str
    model: str | None


class Whoami(msgspec.Struct, frozen=True, kw_only=True):
    user_id: str
    auth_mode: str


async def sessions(svc: Services, caller: Caller, *, agent_id: str | None = None, limit: int = 50) -> list[Session]:
    """The caller's live sessions, newest first (of one agent when given); with a share token, the
    shared session first."""
    if not 1 <= limit <= MAX_SESSIONS:
        raise BadRequest(f"limit must be between 1 and {MAX_SESSIONS}")
    async with svc.connection() as conn:
        rows = await svc.store.sessions.sessions_of(conn, caller.user_id, agent_id, limit)
        shared = []
        if caller.share_token is not None:
            share = await svc.store.sessions.share_by_token(conn, caller.share_token)
            # An unknown token is refused (403) as on every other path, not ignored (access_for).
            access = access_for(caller, share.session_id if share else "", share)
            if share is not None:
                row = await svc.store.sessions.get_session(conn, share.session_id, access.owner)
                shared = [row] if row is not None and (agent_id is None or row.agent_id == agent_id) else []
    return [session_json(r) for r in [*shared, *rows]][:limit]


async def agents(svc: Services) -> list[KnownAgent]:
    """kagent's live agents to pick from (experiments' agents, a judge, a what-if's agent). kagent shows every
    agent to every user; so does this list. An id that spells no namespace/name is left out."""
    async with svc.connection() as conn:
        rows = await svc.store.agents.listed(conn, MAX_AGENTS)
    known = [(agent_ref_of(r.id), r) for r in rows]
    return [
        KnownAgent(
            agent_ref=ref, type=r.type,
            model=r.config.model.model or None if r.config is not None and r.config.model is not None else None,
        )
        for ref, r in known
        if ref is not None
    ]  # fmt: skip


def whoami(svc: Services, caller: Caller) -> Whoami:
    return Whoami(user_id=caller.user_id, auth_mode=svc.settings.auth_mode)


def page_file(name: str) -> tuple[bytes, str]:
    if name not in FILES:
        raise FileNotFoundError(name)
    return (UI_DIR / name).read_bytes(), FILES[name]
