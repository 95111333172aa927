"""What each MCP tool does to the world, said to the agents and hosts that call it (MCP's tool annotations),
as data in one place for the model-facing tools and the views' tools alike. A host may ask before a
destructive or open-world call; the hints must be true, so each says why."""

from __future__ import annotations

from mcp.types import ToolAnnotations

# Reads: change nothing, whatever they are called with.
_READ = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
# A fork only adds a session (the source is never changed); each call adds another.
_ADDS = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False)
# A rewind hides turns of the session (undoable, but the chat the user sees changes).
_HIDES = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=False)
# An undo brings back what a rewind (or a discard) hid; a second undo of it changes nothing.
_RESTORES = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False)
# A discard hides an experiment's branch chats from the user's list (undoable, but the list changes); the same
# discard again changes nothing.
_DISCARDS = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=True, openWorldHint=False)
# A replay sends questions to kagent agents: with reads "live" their read-only tools run live, and with tools
# "live" every tool runs for real (they may act on a cluster).
_RUNS_AGENTS = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=True)
# A judgment asks a kagent agent (its model, for real, and whatever tools it holds) about the branches: it
# changes no session, adds a judgment each call, and reaches outside the service.
_JUDGES = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=True)
# A cancel ends running branches (or a judging) for good and asks their agents (its judge) to stop; a second
# cancel changes nothing.
_CANCELS = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=True, openWorldHint=True)

HINTS: dict[str, ToolAnnotations] = {
    "list_turns": _READ,
    "show_transcript": _READ,
    "compare_sessions": _READ,
    "whatif_status": _READ,
    "list_whatifs": _READ,
    "list_rewinds": _READ,
    "fork_tree": _READ,
    "list_sessions": _READ,
    "experiment_status": _READ,
    "list_suites": _READ,
    "suite_run_status": _READ,
    "fork_session": _ADDS,
    "save_case": _ADDS,
    "rewind_session": _HIDES,
    "undo_rewind": _RESTORES,
    "start_whatif": _RUNS_AGENTS,
    "start_experiment": _RUNS_AGENTS,
    "run_suite": _RUNS_AGENTS,
    "cancel_whatif": _CANCELS,
    "cancel_experiment": _CANCELS,
    "discard_branches": _DISCARDS,
    "undo_discard": _RESTORES,
    "judge_experiment": _JUDGES,
    # The views in kagent's chat (mcp_apps.py): the two that show, and the app-only calls their pages make.
    "show_branches": _READ,
    "show_experiment": _READ,
    "app_branches": _READ,
    "app_compare": _READ,
    "app_experiment": _READ,
    "app_fork": _ADDS,
    "app_rewind": _HIDES,
    "app_undo": _RESTORES,
    "app_start_experiment": _RUNS_AGENTS,
    "app_cancel_experiment": _CANCELS,
}


def hints(name: str) -> ToolAnnotations:
    """The tool's annotations; a tool without any is a mistake (KeyError), caught by the tests."""
    return HINTS[name]
