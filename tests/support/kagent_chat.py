"""Talking to an agent the way kagent 0.10.x's UI does: a session created through the controller
(``POST /api/sessions`` with the agent's ref), then A2A 0.3 JSON-RPC ``message/send`` to the controller's
``/api/a2a/<namespace>/<name>/``, the session as ``contextId``, the user as ``X-User-Id``. An approval is
a message whose data part carries ``decision_type`` (the UI also sends the pending task's id)."""

from __future__ import annotations

import uuid
from typing import Any

import httpx


async def new_session(client: httpx.AsyncClient, controller: str, user: str, agent_ref: str, name: str) -> str:
    r = await client.post(
        f"{controller}/api/sessions", json={"agent_ref": agent_ref, "name": name}, headers={"X-User-Id": user}
    )
    assert r.status_code == 201, r.text
    session_id: str = r.json()["data"]["id"]
    return session_id


def text(value: str) -> dict[str, Any]:
    return {"kind": "text", "text": value}


def approval(decision: str = "approve") -> list[dict[str, Any]]:
    """The parts of the UI's answer to a tool approval card."""
    return [{"kind": "data", "data": {"decision_type": decision}, "metadata": {}}, text(decision.capitalize())]


async def send(
    client: httpx.AsyncClient,
    a2a_url: str,
    agent_ref: str,
    *,
    user: str,
    context_id: str,
    parts: list[dict[str, Any]],
    task_id: str | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One blocking message/send; returns the task the agent answered with (raises on a JSON-RPC error)."""
    message: dict[str, Any] = {
        "kind": "message",
        "messageId": str(uuid.uuid4()),
        "role": "user",
        "parts": parts,
        "contextId": context_id,
    }
    if task_id is not None:
        message["taskId"] = task_id
    body = {
        "jsonrpc": "2.0",
        "id": str(uuid.uuid4()),
        "method": "message/send",
        "params": {"message": message, "configuration": {"blocking": True}},
    }
    r = await client.post(
        f"{a2a_url}/{agent_ref}/", json=body, headers={"X-User-Id": user, **(headers or {})}, timeout=120
    )
    assert r.status_code == 200, r.text
    answer = r.json()
    assert "error" not in answer, answer
    result: dict[str, Any] = answer["result"]
    return result


def task_texts(task: dict[str, Any]) -> list[str]:
    """The text parts of a legacy task's agent messages and artifacts."""
    out = [p["text"] for m in task.get("history", []) if m.get("role") == "agent" for p in m["parts"] if "text" in p]
    out += [p["text"] for a in task.get("artifacts", []) for p in a.get("parts", []) if "text" in p]
    return out
