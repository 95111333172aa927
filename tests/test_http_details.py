"""HTTP details a newcomer meets with curl (issue 25, 9): one charset in a Content-Type, GET / sends people
to the page, HEAD answers where GET does (without the body), and `Allow` names every method of a path."""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg
import httpx
import yaml

from tests.helpers import seed
from tests.support.live_server import http_request, raw_request

DOCUMENT = yaml.safe_load((Path(__file__).resolve().parents[1] / "openapi.yaml").read_text())


async def test_one_charset_in_every_text_answer(live_url: str, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=1)
    async with httpx.AsyncClient(base_url=live_url) as http:
        answers = {
            "/ui/": await http.get("/ui/"),
            "/ui/app.js": await http.get("/ui/app.js"),
            "/metrics": await http.get("/metrics"),
            "markdown": await http.get(
                f"/api/sessions/{conv.session_id}/transcript?format=markdown", headers={"X-User-Id": conv.user_id}
            ),
        }
    for name, r in answers.items():
        assert r.status_code == 200, (name, r.text)
        assert r.headers["content-type"].count("charset") == 1, (name, r.headers["content-type"])
    assert answers["/ui/"].headers["content-type"] == "text/html; charset=utf-8"
    assert answers["markdown"].headers["content-type"] == "text/markdown; charset=utf-8"
    assert answers["/metrics"].headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"


async def test_the_root_sends_people_to_the_page(live_url: str) -> None:
    async with httpx.AsyncClient(base_url=live_url) as http:
        r = await http.get("/")
        followed = await http.get("/", follow_redirects=True)
    assert r.status_code == 307 and r.headers["location"] == "/ui/"
    assert followed.status_code == 200 and "kagent-fork explorer" in followed.text


async def test_head_is_get_without_the_body(live_url: str, pool: asyncpg.Pool) -> None:
    conv = await seed(pool, dialect="v1", turns=1)
    me = ("X-User-Id", conv.user_id)
    for path in ("/healthz", "/ui/", "/openapi.yaml", f"/api/sessions/{conv.session_id}/invocations"):
        got = await raw_request(live_url, http_request("GET", path, [me]))
        head = await raw_request(live_url, http_request("HEAD", path, [me]), no_body=True)
        assert got.status == head.status == 200, (path, got.status, head.status)
        assert dict(head.headers)["content-type"] == dict(got.headers)["content-type"]
        assert head.body == b""
    # a route without GET still refuses HEAD, saying what it allows
    refused = await raw_request(
        live_url, http_request("HEAD", f"/api/sessions/{conv.session_id}/fork", [me]), no_body=True
    )
    assert refused.status == 405 and "POST" in dict(refused.headers)["allow"]


async def test_allow_names_every_method_of_a_path(live_url: str) -> None:
    """Issue 45, 5b: OPTIONS and a 405 name every method the path answers, as openapi.yaml documents them (GET and
    POST of .../experiments are two handlers: OPTIONS named only the first one registered), with HEAD where GET
    is (the service answers it) and OPTIONS itself."""
    async with httpx.AsyncClient(base_url=live_url) as http:
        for template, item in DOCUMENT["paths"].items():
            path = re.sub(r"\{[^}]+\}", "s-1", template)
            documented = {m.upper() for m in item if m in ("get", "post", "put", "patch", "delete")}
            expected = documented | {"OPTIONS"} | ({"HEAD"} if "GET" in documented else set())
            options = await http.options(path)
            assert options.status_code == 204, (path, options.status_code)
            assert set(options.headers["allow"].split(", ")) == expected, (path, options.headers["allow"])
            refused = await http.request("PUT", path, headers={"Content-Type": "application/json"}, content=b"{}")
            assert refused.status_code == 405, (path, refused.status_code)
            assert set(refused.headers["allow"].split(", ")) == expected, (path, refused.headers["allow"])
