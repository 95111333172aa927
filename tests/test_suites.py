"""Suites' cases (docs/suites.md): made by hand, by `select`, one at a time, exported as YAML and imported again;
every case checked as its caller reads it before anything is saved; only the creator sees a suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
import yaml

from tests.helpers import new_user, seed, table_fingerprint
from tests.support.conversations import create_share
from tests.support.framework_fixtures import fresh_copy, load_fixture, read_fixture
from tests.test_mcp_tools import mcp_session, ok, text_of

AGENT = "kagent/k8s-agent"  # the seeded conversations' agent (kagent__NS__k8s_agent)


def _h(user: str, **more: str) -> dict[str, str]:
    return {"X-User-Id": user, **more}


async def _suites(pool: asyncpg.Pool, user: str) -> int:
    async with pool.acquire() as conn:
        return int(await conn.fetchval("SELECT count(*) FROM kagent_fork.suite WHERE user_id = $1", user))


async def test_a_suite_of_cases_by_hand_is_saved_read_listed_and_only_its_creator_sees_it(
    client: Any, pool: asyncpg.Pool
) -> None:
    user = new_user()
    a = await seed(pool, dialect="v1", turns=3, user_id=user)
    b = await seed(pool, dialect="legacy", turns=2, user_id=user)
    body = {
        "name": "weather questions",
        "cases": [
            {"session_id": a.session_id, "rewind_before_invocation_id": a.invocation_ids[1], "turns": 2},
            {"session_id": b.session_id, "rewind_before_task_id": b.turns[0].task_id, "turns": "all",
             "message": {"text": "asked differently"}},
        ],
    }  # fmt: skip
    r = await client.post("/api/suites", json=body, headers=_h(user))
    assert r.status_code == 201, r.text
    suite = r.json()["data"]
    assert r.headers["location"] == f"/api/suites/{suite['id']}"
    assert [(c["session_id"], c["turns"], c["user_text"], c["agent_ref"]) for c in suite["cases"]] == [
        (a.session_id, 2, a.turns[1].user_text, AGENT),
        (b.session_id, "all", b.turns[0].user_text, AGENT),
    ]
    assert suite["cases"][1]["message"] == {"text": "asked differently"}
    assert suite["cases"][1]["rewind_before_task_id"] == b.turns[0].task_id
    read = await client.get(f"/api/suites/{suite['id']}", headers=_h(user))
    assert read.status_code == 200 and read.json()["data"] == suite
    listed = (await client.get("/api/suites", headers=_h(user))).json()["data"]
    assert [(s["id"], s["name"], s["cases"]) for s in listed] == [(suite["id"], "weather questions", 2)]
    # another user: the suite is not there, and the list is empty
    stranger = new_user()
    assert (await client.get(f"/api/suites/{suite['id']}", headers=_h(stranger))).status_code == 404
    assert (await client.get("/api/suites", headers=_h(stranger))).json()["data"] == []
    added = await client.post(f"/api/suites/{suite['id']}/cases", json=body["cases"][0], headers=_h(stranger))
    assert added.status_code == 404


async def test_a_case_the_caller_cannot_read_or_a_turn_the_session_lacks_saves_nothing(
    client: Any, pool: asyncpg.Pool
) -> None:
    owner, other = new_user(), new_user()
    mine = await seed(pool, dialect="v1", turns=2, user_id=owner)
    theirs = await seed(pool, dialect="v1", turns=2, user_id=other)
    good = {"session_id": mine.session_id, "rewind_before_invocation_id": mine.invocation_ids[0]}
    before = await table_fingerprint(pool)
    cases = [
        ([good, {"session_id": theirs.session_id, "rewind_before_invocation_id": theirs.invocation_ids[0]}], 404,
         "Session not found"),
        ([good, {"session_id": mine.session_id, "rewind_before_invocation_id": "e-no-such-turn"}], 404,
         "invocation e-no-such-turn not found"),
        ([{"session_id": mine.session_id, "rewind_before_task_id": "no-such-task"}], 404,
         "task no-such-task not found"),
        ([{"session_id": mine.session_id}], 400, "is required"),
        ([{**good, "rewind_before_task_id": mine.turns[0].task_id}], 400, "not both"),
        ([{**good, "turns": 0}], 422, "1 or more"),
        ([{**good, "turns": True}], 400, "invalid request body"),
        ([{**good, "extra": 1}], 400, "invalid request body"),
    ]  # fmt: skip
    for given, status, says in cases:
        r = await client.post("/api/suites", json={"name": "n", "cases": given}, headers=_h(owner))
        assert r.status_code == status and says in r.json()["error"], (given, r.text)
    assert await table_fingerprint(pool) == before and await _suites(pool, owner) == 0


async def test_select_picks_the_callers_last_conversations_with_the_agent_at_the_chosen_turn(
    client: Any, pool: asyncpg.Pool
) -> None:
    user = new_user()
    now = datetime.now(UTC)
    convs = [
        await seed(pool, dialect="v1", turns=3, user_id=user, start=now - timedelta(hours=10 - i)) for i in range(4)
    ]
    other_agent = await seed(pool, dialect="v1", turns=2, user_id=user, agent_id="kagent__NS__other_agent")
    short = await seed(pool, dialect="legacy", turns=1, user_id=user, start=now - timedelta(hours=1))
    select = {"agent": AGENT, "limit": 3, "turn": 2}
    r = await client.post("/api/suites", json={"name": "second turns", "select": select}, headers=_h(user))
    assert r.status_code == 201, r.text
    cases = r.json()["data"]["cases"]
    # newest first: the one-turn chat has no turn 2 and is passed over; the other agent's is not picked
    assert [c["session_id"] for c in cases] == [convs[3].session_id, convs[2].session_id]
    assert [c["rewind_before_invocation_id"] for c in cases] == [convs[3].invocation_ids[1], convs[2].invocation_ids[1]]
    assert other_agent.session_id not in {c["session_id"] for c in cases} and short.session_id
    last = await client.post(
        "/api/suites", json={"name": "last", "select": {"agent": AGENT, "turn": "last", "limit": 1}}, headers=_h(user)
    )
    assert [c["rewind_before_invocation_id"] for c in last.json()["data"]["cases"]] == [short.invocation_ids[-1]]
    for bad, status in (({"agent": "not a ref"}, 422), ({"agent": AGENT, "limit": 0}, 400),
                        ({"agent": AGENT, "limit": 201}, 400), ({"agent": AGENT, "turn": 0}, 400)):  # fmt: skip
        refused = await client.post("/api/suites", json={"name": "x", "select": bad}, headers=_h(user))
        assert refused.status_code == status, (bad, refused.text)


async def test_cases_of_an_agent_that_names_turns_by_task(client: Any, pool: asyncpg.Pool) -> None:
    """A LangGraph chat (kagent-langgraph 0.10.4's rows): its turns have no invocation id; a case names its task."""
    fixture = fresh_copy(read_fixture("langgraph_3_turns"), new_user())
    async with pool.acquire() as conn:
        await load_fixture(conn, fixture)
    sid, user = fixture["session_id"], fixture["user"]
    tasks = [t["task_id"] for t in fixture["turns"]]
    r = await client.post(
        "/api/suites", json={"name": "lg", "cases": [{"session_id": sid, "rewind_before_task_id": tasks[2]}]},
        headers=_h(user),
    )  # fmt: skip
    assert r.status_code == 201, r.text
    assert r.json()["data"]["cases"][0]["user_text"] == fixture["turns"][2]["question"]


async def test_a_case_added_and_removed_one_at_a_time(client: Any, pool: asyncpg.Pool) -> None:
    user = new_user()
    conv = await seed(pool, dialect="v1", turns=2, user_id=user)
    suite = (await client.post("/api/suites", json={"name": "one by one"}, headers=_h(user))).json()["data"]
    assert suite["cases"] == []
    for invocation in conv.invocation_ids:
        r = await client.post(
            f"/api/suites/{suite['id']}/cases",
            json={"session_id": conv.session_id, "rewind_before_invocation_id": invocation}, headers=_h(user),
        )  # fmt: skip
        assert r.status_code == 201, r.text
    cases = r.json()["data"]["cases"]
    assert [c["rewind_before_invocation_id"] for c in cases] == conv.invocation_ids
    gone = await client.delete(f"/api/suites/{suite['id']}/cases/{cases[0]['case_id']}", headers=_h(user))
    assert gone.status_code == 200, gone.text
    assert [c["case_id"] for c in gone.json()["data"]["cases"]] == [cases[1]["case_id"]]
    again = await client.delete(f"/api/suites/{suite['id']}/cases/{cases[0]['case_id']}", headers=_h(user))
    assert again.status_code == 404


async def test_export_as_yaml_and_import_again_gives_the_same_cases(client: Any, pool: asyncpg.Pool) -> None:
    user = new_user()
    conv = await seed(pool, dialect="v1", turns=3, user_id=user)
    body = {"name": "keep me", "cases": [
        {"session_id": conv.session_id, "rewind_before_invocation_id": conv.invocation_ids[2], "turns": 1,
         "message": {"text": "é, and a: colon"}},
        {"session_id": conv.session_id, "rewind_before_task_id": conv.turns[0].task_id, "turns": "all"},
    ]}  # fmt: skip
    suite = (await client.post("/api/suites", json=body, headers=_h(user))).json()["data"]
    exported = await client.get(f"/api/suites/{suite['id']}/export", headers=_h(user))
    assert exported.status_code == 200 and exported.headers["content-type"].startswith("application/yaml")
    document = yaml.safe_load(exported.text)
    assert document["kind"] == "kagent-fork/suite" and document["version"] == 1 and document["name"] == "keep me"
    assert document["cases"][0]["message"] == {"text": "é, and a: colon"}

    def spec(c: dict[str, Any]) -> tuple[Any, ...]:
        return (c["session_id"], c["rewind_before_invocation_id"], c["rewind_before_task_id"], c["turns"], c["message"])

    for media, payload in (("application/yaml", exported.content), ("application/json", None)):
        content = payload if payload is not None else json.dumps(document).encode()
        r = await client.post("/api/suites/import", content=content, headers=_h(user, **{"Content-Type": media}))
        assert r.status_code == 201, r.text
        imported = r.json()["data"]
        assert imported["id"] != suite["id"] and imported["name"] == "keep me"
        assert [spec(c) for c in imported["cases"]] == [spec(c) for c in suite["cases"]]


@pytest.mark.parametrize(
    ("content", "media", "status", "says"),
    [
        (b"name: x\ncases: [{session_id: s}]\n", "text/plain", 415, "Content-Type"),
        (b"name: [unclosed\n", "application/yaml", 400, "not valid YAML"),
        (b"kind: other/thing\nname: x\n", "application/yaml", 400, "invalid suite file"),
        (b"name: x\nversion: 2\n", "application/yaml", 400, "invalid suite file"),
        (b"a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\nname: *b\n", "application/yaml",
         400, "aliases"),
        (b'name: "\xff"\n', "application/yaml", 400, "not valid UTF-8"),
        (b"{", "application/json", 400, "not valid JSON"),
    ],
)  # fmt: skip
async def test_a_bad_suite_file_is_refused_and_saves_nothing(
    client: Any, pool: asyncpg.Pool, content: bytes, media: str, status: int, says: str
) -> None:
    user = new_user()
    r = await client.post("/api/suites/import", content=content, headers=_h(user, **{"Content-Type": media}))
    assert r.status_code == status and says in r.json()["error"], r.text
    assert await _suites(pool, user) == 0


async def test_through_a_share_link_a_case_names_the_shared_session_and_the_suite_is_the_readers(
    client: Any, pool: asyncpg.Pool
) -> None:
    owner, reader = new_user(), new_user()
    shared = await seed(pool, dialect="v1", turns=2, user_id=owner)
    async with pool.acquire() as conn:
        token = await create_share(conn, session_id=shared.session_id, owner=owner, read_only=True)
    case = {"session_id": shared.session_id, "rewind_before_invocation_id": shared.invocation_ids[1]}
    r = await client.post(
        "/api/suites",
        json={"name": "from a share link", "cases": [case]},
        headers=_h(reader, **{"X-Share-Token": token}),
    )
    assert r.status_code == 201, r.text
    suite = r.json()["data"]
    assert [c["user_text"] for c in suite["cases"]] == [shared.turns[1].user_text]
    # the reader's own suite, read without the token too; the owner does not see it
    assert (await client.get(f"/api/suites/{suite['id']}", headers=_h(reader))).status_code == 200
    assert (await client.get(f"/api/suites/{suite['id']}", headers=_h(owner))).status_code == 404
    # without the token, the reader cannot name the owner's session
    refused = await client.post("/api/suites", json={"name": "x", "cases": [case]}, headers=_h(reader))
    assert refused.status_code == 404
    # an unknown token is refused on every suite call, as on every path
    for method, path in (("GET", "/api/suites"), ("GET", f"/api/suites/{suite['id']}"), ("POST", "/api/suites")):
        bad = await client.request(method, path, json={"name": "x"} if method == "POST" else None,
                                   headers=_h(reader, **{"X-Share-Token": "no-such-token"}))  # fmt: skip
        assert bad.status_code == 403, (method, path, bad.text)


def _cli(database_url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": database_url}
    return subprocess.run(
        [sys.executable, "-m", "service", "suite", *args], env=env, capture_output=True, text=True, timeout=120,
        check=False, input=stdin,
    )  # fmt: skip


async def test_the_cli_makes_fills_shows_exports_and_imports_a_suite(database_url: str, pool: asyncpg.Pool) -> None:
    user = new_user()
    conv = await seed(pool, dialect="v1", turns=2, user_id=user)
    made = _cli(database_url, "create", "from a shell", "--select-agent", AGENT, "--turn", "last", "--user", user,
                "--json")  # fmt: skip
    assert made.returncode == 0, made.stderr
    suite = json.loads(made.stdout)
    assert [c["rewind_before_invocation_id"] for c in suite["cases"]] == [conv.invocation_ids[-1]]
    added = _cli(database_url, "add", suite["id"], conv.session_id, "--before", conv.invocation_ids[0], "--turns",
                 "all", "--message", "again?", "--user", user)  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert "2 cases" in added.stdout and "turns all, asked 'again?'" in added.stdout
    listed = _cli(database_url, "list", "--user", user)
    assert listed.returncode == 0 and f"{suite['id']} 'from a shell': 2 cases" in listed.stdout
    exported = _cli(database_url, "export", suite["id"], "--user", user)
    assert exported.returncode == 0 and yaml.safe_load(exported.stdout)["name"] == "from a shell"
    imported = _cli(database_url, "import", "-", "--user", user, "--json", stdin=exported.stdout)
    assert imported.returncode == 0, imported.stderr
    assert len(json.loads(imported.stdout)["cases"]) == 2
    # refusals exit with the documented codes: not found 3, bad input 2
    assert _cli(database_url, "show", suite["id"], "--user", new_user()).returncode == 3
    missing = _cli(database_url, "add", suite["id"], conv.session_id, "--before", "e-nope", "--user", user)
    assert missing.returncode == 3 and "invocation e-nope not found" in missing.stderr
    assert _cli(database_url, "import", "/no/such/file.yaml", "--user", user).returncode == 2


async def test_an_agent_saves_a_case_over_mcp_with_the_http_bodys_checks(
    client: Any, live_url: str, pool: asyncpg.Pool
) -> None:
    user = new_user()
    conv = await seed(pool, dialect="legacy", turns=2, user_id=user)
    suite = (await client.post("/api/suites", json={"name": "by an agent"}, headers=_h(user))).json()["data"]
    async with mcp_session(live_url, {"X-User-Id": user}) as mcp:
        tool = next(t for t in (await mcp.list_tools()).tools if t.name == "save_case")
        assert tool.annotations is not None and tool.annotations.readOnlyHint is False
        listed = ok(await mcp.call_tool("list_suites", {}))
        assert [(s["id"], s["name"], s["cases"]) for s in listed] == [(suite["id"], "by an agent", 0)]
        saved = ok(await mcp.call_tool("save_case", {
            "suite_id": suite["id"], "session_id": conv.session_id,
            "rewind_before_invocation_id": conv.invocation_ids[1], "turns": "all", "message_text": "once more",
        }))  # fmt: skip
        assert [(c["rewind_before_invocation_id"], c["turns"], c["message"]) for c in saved["cases"]] == [
            (conv.invocation_ids[1], "all", {"text": "once more"})
        ]
        base = {"suite_id": suite["id"], "session_id": conv.session_id}
        for bad, says in (
            ({**base, "rewind_before_invocation_id": conv.invocation_ids[0], "turns": True}, "turns"),
            ({**base, "rewind_before_invocation_id": conv.invocation_ids[0], "turns": 0}, "1 or more"),
            ({**base}, "is required"),
            ({**base, "suite_id": "no-such-suite", "rewind_before_invocation_id": conv.invocation_ids[0]},
             "Suite not found"),
        ):  # fmt: skip
            refused = await mcp.call_tool("save_case", bad)
            assert refused.isError and says in text_of(refused), (bad, text_of(refused))
    read = (await client.get(f"/api/suites/{suite['id']}", headers=_h(user))).json()["data"]
    assert len(read["cases"]) == 1
