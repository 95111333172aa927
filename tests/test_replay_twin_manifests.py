"""`kagent-fork replay-twin NS/NAME` prints the kagent manifests of a replay twin (docs/replay-twins.md): checked
as deploy/'s kagent resources are (tests/test_deploy_manifests.py: kagent.dev/v1alpha2, the fields kagent's CRDs
define, go/api/config/crd/bases/kagent.dev_{agents,remotemcpservers}.yaml on both lines), and pointing at the
replay endpoint for each server of the source agent."""

from __future__ import annotations

import json
import secrets

import asyncpg
import pytest
import yaml

from service.agents.replay.lease import server_key, stands_in_for, twin_of
from service.kagent.store.agents import decode_config
from tests.support.kagent_controller import register_agent
from tests.test_cli import cli

PROMPT = "You are the cluster's agent.\nAnswer briefly.\n\n  Indented: kept."
SERVER_FIELDS = {"description", "protocol", "url", "timeout", "sseReadTimeout", "headersFrom", "terminateOnClose",
                 "tls", "allowedNamespaces"}  # fmt: skip
MCP_SERVER_FIELDS = {"apiGroup", "kind", "name", "namespace", "toolNames", "requireApproval", "allowedHeaders"}


async def test_replay_twin_prints_an_agent_like_the_source_whose_servers_are_the_replay_endpoint(
    database_url: str, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"k8s-{secrets.token_hex(3)}"
    source = f"kagent/{name}"
    config = {
        "model": {"type": "anthropic", "model": "claude-sonnet-4-5"},
        "description": "the cluster's agent",
        "instruction": PROMPT,
        "http_tools": [
            {
                "params": {"url": "http://kagent-tool-server.kagent:8084/mcp", "headers": {"X-Api-Key": "k"}},
                "tools": ["k8s_get_resources", "k8s_delete_resource"],
                "require_approval": ["k8s_delete_resource"],
                "allowed_headers": ["Authorization"],
            }
        ],
        "sse_tools": [{"params": {"url": "http://grafana-mcp.monitoring:8000/sse"}}],
        "remote_agents": [{"name": "helper", "url": "http://kagent-controller.kagent:8083/api/a2a/kagent/helper"}],
    }
    async with pool.acquire() as conn:
        await register_agent(conn, source, config)

    done = cli(database_url, "replay-twin", source, "--endpoint", "http://kagent-fork.kagent.svc:8083/replay/mcp")
    assert done.returncode == 0, done.stderr
    docs = list(yaml.safe_load_all(done.stdout))
    servers = [d for d in docs if d["kind"] == "RemoteMCPServer"]
    (agent,) = [d for d in docs if d["kind"] == "Agent"]
    assert len(docs) == 3 and len(servers) == 2
    assert "claude-sonnet-4-5" in done.stdout.split("---")[0] and "helper" in done.stdout  # said, as comments

    for doc in docs:
        assert doc["apiVersion"] == "kagent.dev/v1alpha2" and doc["metadata"]["namespace"] == "kagent"
        assert doc["metadata"]["annotations"] == {"kagent-fork.dev/replay-of": source}
    for server in servers:
        assert set(server["spec"]) <= SERVER_FIELDS and server["spec"]["protocol"] == "STREAMABLE_HTTP"
    urls = {twin_of(s["spec"]["url"]) for s in servers}
    assert urls == {
        (source, server_key("http://kagent-tool-server.kagent:8084/mcp")),
        (source, server_key("http://grafana-mcp.monitoring:8000/sse")),
    }
    assert all(s["spec"]["url"].startswith("http://kagent-fork.kagent.svc:8083/replay/mcp/kagent/") for s in servers)

    spec = agent["spec"]
    assert agent["metadata"]["name"] == f"{name}-replay" and spec["type"] == "Declarative"
    assert set(spec["declarative"]) == {"modelConfig", "systemMessage", "tools"}
    assert spec["declarative"]["systemMessage"] == PROMPT  # the same prompt, exactly
    assert spec["declarative"]["modelConfig"] == "default-model-config"
    tools = [t["mcpServer"] for t in spec["declarative"]["tools"]]
    assert all(t["type"] == "McpServer" for t in spec["declarative"]["tools"])
    assert {t["name"] for t in tools} == {s["metadata"]["name"] for s in servers}
    for t in tools:
        assert set(t) <= MCP_SERVER_FIELDS and t["kind"] == "RemoteMCPServer" and t["apiGroup"] == "kagent.dev"
        assert {"authorization", "x-user-id"} <= {h.lower() for h in t["allowedHeaders"]}
        assert set(t.get("requireApproval", [])) <= set(t.get("toolNames", []))  # kagent's CRD rule
    kubectl = next(t for t in tools if "toolNames" in t)
    assert kubectl["toolNames"] == ["k8s_get_resources", "k8s_delete_resource"]
    assert kubectl["requireApproval"] == ["k8s_delete_resource"]

    # without --endpoint: REPLAY_MCP_URL, the base the service counts twins by
    monkeypatch.setenv("REPLAY_MCP_URL", "http://fork.example:9000/replay/mcp")
    again = cli(database_url, "--json", "replay-twin", source, "--name", "my-twin", "--model-config", "gpt")
    assert again.returncode == 0, again.stderr
    printed = json.loads(again.stdout)
    urls = [d["spec"]["url"] for d in printed["manifests"] if d["kind"] == "RemoteMCPServer"]
    assert urls and all(u.startswith(f"http://fork.example:9000/replay/mcp/{source}/") for u in urls)
    (named,) = [d for d in printed["manifests"] if d["kind"] == "Agent"]
    assert named["metadata"]["name"] == "my-twin" and named["spec"]["declarative"]["modelConfig"] == "gpt"

    # kagent renders that Agent into a config whose servers are all the replay endpoint's: a replay twin
    twin_config = {"http_tools": [{"params": {"url": s["spec"]["url"]}} for s in servers]}
    assert stands_in_for(decode_config(json.dumps(twin_config))[0]) == [source]


def test_replay_twin_refuses_an_unknown_agent(database_url: str) -> None:
    done = cli(database_url, "replay-twin", "kagent/nobody-here")
    assert done.returncode != 0 and "not found" in done.stderr and done.stdout == ""


def test_deploy_sets_replay_mcp_url_to_the_services_replay_endpoint_the_cli_defaults_to() -> None:
    from pathlib import Path

    from service.doors.cli import DEFAULT_REPLAY_ENDPOINT

    docs = list(yaml.safe_load_all((Path(__file__).parents[1] / "deploy" / "deployment.yaml").read_text()))
    (deployment,) = [d for d in docs if d and d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["REPLAY_MCP_URL"] == DEFAULT_REPLAY_ENDPOINT
    port = container["ports"][0]["containerPort"]
    assert f"http://kagent-fork.kagent.svc:{port}/replay/mcp" == DEFAULT_REPLAY_ENDPOINT
