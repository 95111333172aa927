"""The store: typed functions over the named SQL in sql/queries/, one small module per thing stored
(agents, sessions, events, tasks, lineage and idempotency, rewinds, jobs, experiments, the replay endpoint's
calls, the turn map, suites, and the database itself); the only code that sees asyncpg rows. Imports nothing of the
service above kagent's data.
"""

from __future__ import annotations

import re
from pathlib import Path

from service.kagent.store.agents import Agents
from service.kagent.store.base import Queries
from service.kagent.store.crewai import CrewAI
from service.kagent.store.database import Database
from service.kagent.store.events import Events
from service.kagent.store.experiments import Experiments
from service.kagent.store.jobs import Jobs
from service.kagent.store.judgments import Judgments
from service.kagent.store.langgraph import LangGraph
from service.kagent.store.lineage import LineageStore
from service.kagent.store.replay import Replay
from service.kagent.store.rewinds import Rewinds
from service.kagent.store.sessions import Sessions
from service.kagent.store.suite_runs import SuiteRuns
from service.kagent.store.suites import Suites
from service.kagent.store.tasks import Tasks
from service.kagent.store.turn_map import TurnMaps

_PARTS = (
    "agents",
    "base",
    "crewai",
    "database",
    "events",
    "experiments",
    "jobs",
    "judgments",
    "langgraph",
    "lineage",
    "replay",
    "rewinds",
    "sessions",
    "suite_runs",
    "suites",
    "tasks",
    "turn_map",
)


class Store:
    """The service's queries, loaded once, and the store's parts over them; a query name that a part runs
    and the SQL lacks fails here, at start-up."""

    def __init__(
        self,
        schema: str,
        directory: Path | None = None,
        *,
        max_fork_events: int = 0,
        turn_map_min_tasks: int | None = 200,
    ) -> None:
        self.queries = Queries(schema, directory, max_fork_events=max_fork_events)
        here = Path(__file__).resolve().parent
        used = {n for part in _PARTS for n in re.findall(r'self\.q\["(\w+)"\]', (here / f"{part}.py").read_text())}
        missing = used - self.queries.q.keys()
        if missing:
            raise LookupError(f"sql/queries/ lacks the queries {sorted(missing)}")
        self.database = Database(self.queries)
        self.agents = Agents(self.queries)
        self.sessions = Sessions(self.queries)
        self.events = Events(self.queries)
        self.tasks = Tasks(self.queries)
        self.lineage = LineageStore(self.queries)
        self.rewinds = Rewinds(self.queries)
        self.jobs = Jobs(self.queries)
        self.crewai = CrewAI(self.queries)
        self.langgraph = LangGraph(self.queries)
        self.experiments = Experiments(self.queries)
        self.replay = Replay(self.queries)
        self.judgments = Judgments(self.queries)
        self.turn_maps = TurnMaps(self.queries)
        self.suites = Suites(self.queries)
        self.suite_runs = SuiteRuns(self.queries)
        # Sessions with at least this many live tasks get a turn map (service/kagent/turn_map.py); None:
        # no map is made or read (the exact searches answer everything, as before the map).
        self.turn_map_min_tasks = turn_map_min_tasks
        # A map to build from scratch is built after the operation that found it missing, in the background
        # (turn_map.first_touch_exact); False: inside the operation, before it reads (the tests of the map).
        self.turn_map_background = True

    @property
    def schema(self) -> str:
        return self.queries.schema

    @property
    def q(self) -> dict[str, str]:
        return self.queries.q
