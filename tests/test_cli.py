"""The operator CLI: the same operations as the API, readable or --json, with exit codes that say why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import asyncpg

from tests.helpers import new_user, seed
from tests.support.conversations import create_share


def cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": database_url}
    return subprocess.run(
        [sys.executable, "-m", "service", *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def ok_json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


async def test_a_cli_session(database_url: str, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="legacy", turns=4, tool_calls=True)
    user = ["--user", conv.user_id]
    turns = ok_json(cli(database_url, "invocations", conv.session_id, *user, "--json"))
    assert [t["invocation_id"] for t in turns] == conv.invocation_ids
    table = cli(database_url, "invocations", conv.session_id, *user)
    assert table.returncode == 0 and conv.turns[0].user_text[:40] in table.stdout

    fork = ok_json(cli(database_url, "fork", conv.session_id, *user, "--before", turns[3]["invocation_id"], "--json"))
    assert fork["fork"]["depth"] == 1 and fork["fork"]["events_copied"] > 0
    fork2 = ok_json(cli(database_url, "fork", fork["id"], *user, "--before", turns[2]["invocation_id"], "--json"))
    assert fork2["fork"]["depth"] == 2 and fork2["fork"]["fork_root_session_id"] == conv.session_id
    readable = cli(database_url, "fork", fork["id"], *user, "--dry-run")
    assert readable.returncode == 0 and readable.stdout.startswith("Dry run: would create")

    rewound = ok_json(
        cli(database_url, "rewind", conv.session_id, *user, "--before", turns[1]["invocation_id"], "--json")
    )
    assert rewound["rewind"]["tasks_removed"] == 3
    undone = ok_json(cli(database_url, "undo", conv.session_id, rewound["rewind"]["id"], *user, "--json"))
    assert undone["rewind"]["undone_at"]

    tree = cli(database_url, "tree", fork2["id"], *user)
    assert tree.returncode == 0
    lines = tree.stdout.splitlines()
    assert lines[0].startswith(conv.session_id) and fork["id"] in lines[1] and fork2["id"] in lines[2]
    assert lines[2].lstrip().startswith("└── ")


async def test_exit_codes(database_url: str, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=2, running_last_turn=True)
    missing = cli(database_url, "fork", "no-such-session", "--user", conv.user_id, "--json")
    assert missing.returncode == 3 and json.loads(missing.stdout) == {"error": "Session not found"}
    running = cli(
        database_url, "rewind", conv.session_id, "--user", conv.user_id, "--before", conv.turns[0].invocation_id
    )
    assert running.returncode == 5 and "still running" in running.stderr
    async with pool.acquire() as conn:
        token = await create_share(conn, session_id=conv.session_id, owner=conv.user_id, read_only=True)
    forbidden = cli(
        database_url, "rewind", conv.session_id, "--user", new_user(), f"--share-token={token}",
        "--before", conv.turns[0].invocation_id,
    )  # fmt: skip
    assert forbidden.returncode == 4 and "read-only" in forbidden.stderr
    bad = cli(database_url, "fork", "x" * 300, "--user", conv.user_id)
    assert bad.returncode in (2, 3)
    usage = cli(database_url, "rewind", conv.session_id)
    assert usage.returncode == 2 and "--before" in usage.stderr


async def test_show_rewinds_and_compare(database_url: str, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=3, tool_calls=True)
    user = ["--user", conv.user_id]
    markdown = cli(database_url, "show", conv.session_id, *user)
    assert markdown.returncode == 0, markdown.stderr
    assert markdown.stdout.startswith(f"# {conv.name}") and conv.turns[2].user_text in markdown.stdout
    data = ok_json(cli(database_url, "show", conv.session_id, *user, "--before", conv.invocation_ids[1], "--json"))
    assert [t["invocation_id"] for t in data["turns"]] == conv.invocation_ids[:1]
    missing = cli(database_url, "show", conv.session_id, *user, "--before", "e-nope")
    assert missing.returncode == 3 and "e-nope" in missing.stderr

    fork = ok_json(cli(database_url, "fork", conv.session_id, *user, "--before", conv.invocation_ids[2], "--json"))
    assert fork["fork"]["summary"]["turns"] == 1
    compared = ok_json(cli(database_url, "compare", conv.session_id, fork["id"], *user, "--json"))
    assert compared["common_turns"] == 2 and compared["left"]["turns_after"] == 1
    readable = cli(database_url, "compare", conv.session_id, fork["id"], *user)
    assert readable.returncode == 0 and readable.stdout.startswith("2 turns in common")

    rewound = ok_json(cli(database_url, "rewind", conv.session_id, *user, "--before", conv.invocation_ids[1], "--json"))
    listed = ok_json(cli(database_url, "rewinds", conv.session_id, *user, "--json"))
    assert [(r["id"], r["undoable"]) for r in listed] == [(rewound["rewind"]["id"], True)]
    table = cli(database_url, "rewinds", conv.session_id, *user)
    assert table.returncode == 0 and rewound["rewind"]["id"] in table.stdout and "undoable" in table.stdout


async def test_version_help_forks_and_json_first(database_url: str, pool: asyncpg.Pool) -> None:
    version = cli(database_url, "--version")
    assert version.returncode == 0 and version.stdout.startswith("kagent-fork ")
    helped = cli(database_url, "fork", "--help")
    assert (
        helped.returncode == 0
        and "(default: admin@kagent.dev)" in helped.stdout
        and "--if-boundary-missing" in helped.stdout
    )
    assert "(default: 8083)" in cli(database_url, "serve", "--help").stdout
    conv = await seed(pool, dialect="v1", turns=3)
    user = ["--user", conv.user_id]
    fork = ok_json(cli(database_url, "--json", "fork", conv.session_id, *user, "--before", conv.invocation_ids[2]))
    forks = ok_json(cli(database_url, "--json", "forks", conv.session_id, *user))
    assert [f["session_id"] for f in forks] == [fork["id"]] and forks[0]["fork"]["summary"]["turns"] == 1
    readable = cli(database_url, "forks", conv.session_id, *user)
    assert readable.returncode == 0 and readable.stdout.startswith(fork["id"])


async def test_the_demo_turns_are_logged_on_every_start(server_url: str) -> None:
    from service.embedded.server import prepare_demo
    from tests.conftest import create_database, drop_database

    url = await create_database(server_url)
    try:
        first = await prepare_demo(url)
        again = await prepare_demo(url)
    finally:
        await drop_database(server_url, url)
    assert [s for s, _ in first] == ["demo-legacy-session", "demo-v1-session"]
    assert again == first and all(len(ids) == 3 for _, ids in again)


async def test_a_closed_pipe_is_a_quiet_exit(database_url: str, pool: asyncpg.Pool) -> None:
    """Issue 25, 6: `kagent-fork show S | head -3` ends quietly, with or without --json."""
    conv = await seed(pool, dialect="v1", turns=40, tool_calls=True)
    for extra in ([], ["--json"]):
        done = piped(database_url, "show", conv.session_id, "--user", conv.user_id, *extra)
        assert done.stdout.rstrip().endswith("exit 0"), (done.stdout, done.stderr)
        assert done.stderr == "", done.stderr


def piped(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI's output read by `head -c 100`, which stops reading; stdout ends with the CLI's exit code."""
    env = {**os.environ, "DATABASE_URL": database_url}
    command = " ".join([sys.executable, "-m", "service", *args])
    return subprocess.run(
        f"{command} | head -c 100; code=${{PIPESTATUS[0]}}; echo; echo \"exit $code\"",
        shell=True, executable="/bin/bash", env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


async def test_help_plurals_and_the_comparison_turn_by_turn(database_url: str, pool: asyncpg.Pool) -> None:
    helped = cli(database_url, "fork", "--help").stdout + cli(database_url, "whatif", "--help").stdout
    assert "(default: None)" not in helped and "(default: False)" not in helped
    assert "9 not configured" in helped
    conv = await seed(pool, dialect="v1", turns=2, tool_calls=True)
    user = ["--user", conv.user_id]
    fork = ok_json(cli(database_url, "fork", conv.session_id, *user, "--before", conv.invocation_ids[1], "--json"))
    dry = cli(database_url, "fork", fork["id"], *user, "--dry-run").stdout
    assert " 1 task " in dry or " 1 task (" in dry, dry
    compared = cli(database_url, "compare", conv.session_id, fork["id"], *user).stdout
    lines = compared.splitlines()
    assert lines[0] == "1 turn in common"
    assert "1 turn after" in lines[1] and "0 turns after" in lines[2] and "last answer (none)" in lines[2]
    assert lines[3] == "turn 2:" and conv.turns[1].user_text[:40] in lines[4] and lines[6] == "  right (no turn 2)"
    tree = cli(database_url, "tree", conv.session_id, *user).stdout.splitlines()
    assert "2 turns" in tree[0] and "now" in tree[0]
    assert "forked at turn 2" in tree[1] and "1 turn," in tree[1], tree


async def test_a_database_without_kagents_tables_is_one_line_and_exit_10(server_url: str) -> None:
    """As `serve` refuses it (issue 32): no traceback, the reason in one line, a documented exit code."""
    from tests.conftest import drop_database, with_database

    name = "kf_test_empty_" + new_user().split("@")[0].replace("-", "_")
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    url = with_database(server_url, name)
    try:
        result = cli(url, "invocations", "some-session")
        assert result.returncode == 10, result.stderr
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
        assert "DATABASE_URL" in result.stderr
    finally:
        await drop_database(server_url, url)
