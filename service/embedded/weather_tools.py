"""The demo's own MCP tool server (streamable HTTP, the MCP SDK's FastMCP), served on 127.0.0.1 beside the
scripted agents, so that the demo's arms have real tools to class and to replay: `get_weather` and
`get_forecast` read, `set_alert` acts (it keeps the alert: the one thing on the demo a replay must not do).

Its answers are today's world (scripts.WEATHER), not the demo conversations' recorded one: a replay that runs its
reads live drifts from the source, one answered from the recording does not. Its tools say `readOnlyHint` as a
server may; the demo counts them as reads on the operator's word (REPLAY_READ_ONLY_TOOLS, set by `serve`), never
on that hint."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations

from service.embedded import threaded
from service.embedded.scripts import FORECAST, WEATHER

log = logging.getLogger("kagent_fork")
PATH = "/mcp"
READS = ("get_weather", "get_forecast")
ACTS = ("set_alert",)


class Weather(TypedDict):
    city: str
    temp_c: float
    sky: str


class Forecast(TypedDict):
    city: str
    day: str
    temp_c: float


class Alert(TypedDict):
    city: str
    message: str
    set: bool


@dataclass
class Alerts:
    """The alerts set so far: what acting left behind (a test checks that a replay left nothing)."""

    set: list[tuple[str, str]] = field(default_factory=list)


def _known(city: str) -> str:
    key = city.strip().lower()
    if key not in WEATHER:
        raise ValueError(f"no weather station for {city!r}")
    return key


def tools_app(alerts: Alerts) -> Any:
    """The server's ASGI app (its session manager runs in the app's lifespan)."""
    mcp = FastMCP("kagent-fork demo tools", host="127.0.0.1", stateless_http=True, json_response=True)

    @mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def get_weather(city: str) -> Weather:
        """Today's weather in a city."""
        temp, sky = WEATHER[_known(city)]
        return {"city": city.title(), "temp_c": temp, "sky": sky}

    @mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def get_forecast(city: str, day: str = "tomorrow") -> Forecast:
        """A city's forecast temperature for a day."""
        return {"city": city.title(), "day": day, "temp_c": FORECAST[_known(city)]}

    @mcp.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
    def set_alert(city: str, message: str) -> Alert:
        """Set a weather alert for a city (it notifies whoever follows the city)."""
        alerts.set.append((city, message))
        log.warning("demo tool server: alert set for %s: %s", city, message)
        return {"city": city.title(), "message": message, "set": True}

    return mcp.streamable_http_app()


def start(host: str = "127.0.0.1", alerts: Alerts | None = None) -> tuple[str, Callable[[], None]]:
    """Serve the tools in a daemon thread; (the server's URL as an agent's config names it, a function that stops
    it). The port is new at every start."""
    port, stop = threaded.start(tools_app(alerts or Alerts()), "demo tool server", host, lifespan="on")
    return f"http://{host}:{port}{PATH}", stop
