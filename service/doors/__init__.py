"""The doors: how people and programs reach the service (HTTP handlers, the CLI, the MCP tools, the replay
endpoint for replay twins, the explorer page).

Each door decodes a request, calls one operation, reading or agent job, and encodes the answer. A door may
import everything below it (agents, branches, operations, the frame, kagent's data); nothing imports a door
but the application (`service.app`) and `python -m service`.
"""
