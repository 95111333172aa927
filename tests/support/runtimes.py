"""kagent's agent runtimes as processes of their own, each from its own virtual environment, started the
way kagent's controller starts one in an agent's pod: a command, a directory of files (the agent's
rendered config) and environment variables (``KAGENT_URL``, ``KAGENT_NAME``, ``KAGENT_NAMESPACE``).

A runtime's environment is ``.venv-<name>`` at the repository's top, made by ``scripts/runtime-venv <name>``
from ``scripts/runtimes/<name>.txt`` when the first test that needs it asks for it (``runtime_venv``). It is
its own environment because kagent's 0.10.x runtimes pin libraries the tests' environment has newer
(google-adk below 2, a2a-sdk 0.3).
When it cannot be made, ``runtime_venv`` raises ``RuntimeUnavailable`` saying why: the tests then fail, they
do not skip.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


class RuntimeUnavailable(RuntimeError):
    """A runtime's environment cannot be used, or the runtime did not start: the message says why."""


def runtime_venv(name: str) -> Path:
    """The runtime's virtual environment, made from its pinned requirements the first time a test needs it (so
    that `./scripts/test -k EXPR` installs only the runtimes its tests use), and checked against them."""
    venv = ROOT / f".venv-{name}"
    requirements = ROOT / "scripts" / "runtimes" / f"{name}.txt"
    how = f"`scripts/runtime-venv {name}` installs it from {requirements.name}"
    if not requirements.exists():
        raise RuntimeUnavailable(f"{name}'s virtual environment {venv} is missing and no {requirements} pins it")
    wanted = hashlib.sha256(requirements.read_bytes()).hexdigest()
    stamp = venv / ".requirements.sha256"
    # One maker at a time: tests start several runtimes of one environment at once (threads, processes), and two
    # makers of one venv trip over each other's files. Whoever waited finds it made, by the stamp.
    with (ROOT / f".venv-{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / "bin" / "python").exists() or not stamp.exists() or stamp.read_text().strip() != wanted:
            script = str(ROOT / "scripts" / "runtime-venv")
            made = subprocess.run([script, name], capture_output=True, text=True, check=False)
            if made.returncode != 0:
                why = made.stderr[-3000:]
                raise RuntimeUnavailable(f"{name}'s virtual environment {venv} could not be made ({how}):\n{why}")
    if not stamp.exists() or stamp.read_text().strip() != wanted:
        raise RuntimeUnavailable(f"{venv} was not installed from the current {requirements.name}: {how}")
    return venv


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class RuntimeSpec:
    """One runtime to start: `argv` is run from the venv's bin directory; `{dir}` and `{port}` in it (and in
    `env`'s values) are replaced by the directory holding `files` and the port to serve on."""

    name: str  # the environment: .venv-<name>
    argv: tuple[str, ...]
    files: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    health_path: str = "/health"
    start_seconds: float = 180


@dataclass(frozen=True)
class RunningRuntime:
    url: str
    pid: int
    log: Path
    started_in: float  # seconds from the process's start to its first healthy answer

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@contextmanager
def running_runtime(spec: RuntimeSpec) -> Iterator[RunningRuntime]:
    """Start the runtime, wait until it answers its health path, and stop it when the block ends."""
    venv = runtime_venv(spec.name)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix=f"{spec.name}-") as tmp:
        config = Path(tmp) / "config"
        config.mkdir()
        for filename, text in spec.files.items():
            (config / filename).write_text(text)
        argv = [a.replace("{dir}", str(config)).replace("{port}", str(port)) for a in spec.argv]
        argv[0] = str(venv / "bin" / argv[0])
        env = {
            "PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": tmp,
            "PYTHONUNBUFFERED": "1",
            **{k: v.replace("{dir}", str(config)).replace("{port}", str(port)) for k, v in spec.env.items()},
        }
        log = Path(tmp) / "runtime.log"
        started = time.monotonic()
        with log.open("wb") as out:
            # no terminal, as in a pod (crewai's first-run tracing prompt reads stdin and would wait 20 s)
            process = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=tmp
            )
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_healthy(process, f"{url}{spec.health_path}", spec, log, started)
            yield RunningRuntime(url=url, pid=process.pid, log=log, started_in=time.monotonic() - started)
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def _wait_healthy(process: subprocess.Popen[bytes], health: str, spec: RuntimeSpec, log: Path, started: float) -> None:
    while True:
        if process.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
            raise RuntimeUnavailable(f"{spec.name} exited with {process.returncode} before it answered:\n{tail}")
        try:
            if httpx.get(health, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() - started > spec.start_seconds:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
            raise RuntimeUnavailable(f"{spec.name} did not answer {health} within {spec.start_seconds} s:\n{tail}")
        time.sleep(0.2)


def kagent_adk(
    agent_ref: str, *, kagent_url: str, config: Mapping[str, object], description: str = "a test agent"
) -> RuntimeSpec:
    """kagent-adk (0.10.x line) as kagent's controller runs an Agent of `agent_ref` ("namespace/name"):
    `kagent-adk static --filepath DIR`, DIR holding the rendered `config.json` and `agent-card.json`."""
    import json

    namespace, name = agent_ref.split("/", 1)
    card = {
        "name": name.replace("-", "_"),
        "description": description,
        "url": f"{kagent_url}/api/a2a/{agent_ref}/",
        "version": "0.1.0",
        "capabilities": {"streaming": True, "pushNotifications": False, "stateTransitionHistory": True},
        "defaultInputModes": ["text"],
        "defaultOutputModes": ["text"],
        "skills": [],
    }
    return RuntimeSpec(
        name="kagent-adk",
        argv=("kagent-adk", "static", "--filepath", "{dir}", "--host", "127.0.0.1", "--port", "{port}"),
        files={"config.json": json.dumps(config), "agent-card.json": json.dumps(card)},
        env={
            "KAGENT_URL": kagent_url,
            "KAGENT_NAME": name,
            "KAGENT_NAMESPACE": namespace,
            "OPENAI_API_KEY": "sk-scripted",  # the scripted model takes any key
            "LOG_LEVEL": "warning",
            "OTEL_SDK_DISABLED": "true",
        },
    )


AGENTS = Path(__file__).resolve().parent / "runtime_agents"


def _card(agent_ref: str, kagent_url: str, description: str) -> dict[str, object]:
    name = agent_ref.split("/", 1)[1]
    return {
        "name": name.replace("-", "_"),
        "description": description,
        "url": f"{kagent_url}/api/a2a/{agent_ref}/",
        "version": "0.1.0",
        "capabilities": {"streaming": True, "pushNotifications": False, "stateTransitionHistory": True},
        "defaultInputModes": ["text"],
        "defaultOutputModes": ["text"],
        "skills": [],
    }


def byo_agent(runtime: str, source: str, agent_ref: str, *, kagent_url: str, model_url: str) -> RuntimeSpec:
    """A BYO agent of kagent's `runtime` (kagent-langgraph, -openai, -crewai) as kagent runs its Deployment: the
    image's command (`python agent.py`, here the file `source` of runtime_agents/ beside its agent-card.json)
    with KAGENT_URL, KAGENT_NAME, KAGENT_NAMESPACE and PORT set, and the agent's own env (the model)."""
    import json

    namespace, name = agent_ref.split("/", 1)
    return RuntimeSpec(
        name=runtime,
        argv=("python", "{dir}/agent.py"),
        files={
            "agent.py": (AGENTS / source).read_text(),
            "agent-card.json": json.dumps(_card(agent_ref, kagent_url, f"a {runtime} test agent")),
        },
        env={
            "KAGENT_URL": kagent_url,
            "KAGENT_NAME": name,
            "KAGENT_NAMESPACE": namespace,
            "PORT": "{port}",
            "HOST": "127.0.0.1",
            "OPENAI_API_KEY": "sk-scripted",  # the scripted model takes any key
            "OPENAI_BASE_URL": model_url,  # langchain-openai's client
            "OPENAI_API_BASE": model_url,  # kagent-openai's _configure_openai_client
            "OTEL_SDK_DISABLED": "true",
            "OPENAI_AGENTS_DISABLE_TRACING": "true",
            "LANGSMITH_TRACING": "false",
            "CREWAI_DISABLE_TELEMETRY": "true",  # crewai's and chromadb's telemetry (no internet here)
            "CREWAI_TRACING_ENABLED": "false",
            "ANONYMIZED_TELEMETRY": "false",
        },
    )
