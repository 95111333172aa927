"""kagent 0.10.x as the BYO runtime tests run beside it: a database at kagent's release/v0.10.x migration (the line
on which kagent keeps LangGraph's checkpoints and CrewAI's rows), the service's schema migrated, the controller
stand-in, the scripted model and the service itself, started together and stopped together."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass

import asyncpg

from service.app import create_app
from service.config import Settings
from service.kagent.migrate import migrate
from tests.conftest import create_database, drop_database
from tests.support.kagent_controller import RunningController, running_controller
from tests.support.live_server import live_server
from tests.support.scripted_model import RunningModel, running_model

MIGRATION_0_10 = 7  # kagent's release/v0.10.x


@dataclass(frozen=True)
class Line:
    url: str
    pool: asyncpg.Pool
    controller: RunningController
    model: RunningModel
    service: str


@asynccontextmanager
async def running_line(server_url: str, settings: Settings) -> AsyncIterator[Line]:
    url = await create_database(server_url, migration_version=MIGRATION_0_10)
    pool = await asyncpg.create_pool(url, min_size=1, max_size=8)
    try:
        async with pool.acquire() as conn:
            await migrate(conn, settings.service_schema)
        with ExitStack() as stack:
            controller = stack.enter_context(running_controller(url))
            model = stack.enter_context(running_model())
            service_settings = dataclasses.replace(settings, database_url=url, kagent_a2a_url=controller.a2a_url)
            service = stack.enter_context(live_server(create_app(service_settings, url)))
            yield Line(url, pool, controller, model, service)
    finally:
        await pool.close()
        await drop_database(server_url, url)
