"""The SQL layer against real PostgreSQL: queries that must hold whatever plan PostgreSQL picks."""

from __future__ import annotations

import asyncpg

from service.kagent.store import Store
from tests.helpers import seed


async def test_turn_listing_survives_a_parallel_plan(database_url: str, pool: asyncpg.Pool) -> None:
    """The JSON helpers catch bad JSON in a subtransaction, which parallel workers cannot run: they must
    be PARALLEL UNSAFE so that PostgreSQL never plans them into a parallel scan."""
    conv = await seed(pool, dialect="v1", turns=6, tool_calls=True)
    conn = await asyncpg.connect(database_url)  # a plain connection: none of the pool's settings
    try:
        for setting in ("max_parallel_workers_per_gather = 4", "parallel_setup_cost = 0", "parallel_tuple_cost = 0",
                        "min_parallel_table_scan_size = 0"):  # fmt: skip
            await conn.execute(f"SET {setting}")
        force = "debug_parallel_query" if conn.get_server_version().major >= 16 else "force_parallel_mode"
        await conn.execute(f"SET {force} = on")
        turns = await Store("kagent_fork").events.event_turns(conn, conv.session_id, conv.user_id)
        assert [t.invocation_id for t in turns] == conv.invocation_ids
        unsafe = await conn.fetchval(
            "SELECT bool_and(proparallel = 'u') FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'kagent_fork' AND p.proname IN ('invocation_id_of', 'try_jsonb')"
        )
        assert unsafe is True
    finally:
        await conn.close()
