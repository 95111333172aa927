"""kagent-fork serve | fork | rewind | undo | invocations | tree: one entry point for people and scripts."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence

from service.config import ConfigError, Settings, from_env

log = logging.getLogger("kagent_fork")


def _database_url(settings: Settings, *, demo: bool) -> str:
    if settings.database_url:
        return settings.database_url
    from service.embedded import prepare_demo, start_embedded

    dsn = start_embedded(settings.embedded_data_dir)
    made = asyncio.run(prepare_demo(dsn)) if demo else []
    for session_id, invocations in made:
        log.info("demo session %s, turns %s", session_id, ", ".join(invocations))
    return dsn


def serve(settings: Settings, host: str, port: int, workers: int) -> int:
    import uvicorn

    dsn = _database_url(settings, demo=True)
    os.environ["KAGENT_FORK_RESOLVED_DSN"] = dsn
    uvicorn.run(
        "service.app:app_from_env",
        host=host,
        port=port,
        workers=workers,
        loop="uvloop",
        http="httptools",
        log_level="info",
        access_log=False,
        factory=True,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    parser = argparse.ArgumentParser(prog="kagent-fork", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    p_serve = commands.add_parser("serve", help="serve the HTTP API")
    p_serve.add_argument("--host", default="127.0.0.1")
    p_serve.add_argument("--port", type=int, default=8083)
    p_serve.add_argument("--workers", type=int, default=1, help="worker processes (one per core in production)")
    args = parser.parse_args(argv)
    try:
        settings = from_env(os.environ)
    except ConfigError as exc:
        print(f"kagent-fork: configuration error: {exc}", file=sys.stderr)
        return 2
    if args.command == "serve":
        return serve(settings, args.host, args.port, args.workers)
    parser.error(f"unknown command {args.command}")
    return 2
