"""The TypeScript client (clients/typescript) passes its tests against a real running kagent-fork.

`npm test` compiles the client with tsc and runs Node's test runner; its script starts
`kagent-fork serve` (this virtualenv's) on a free port with the embedded demo database, and stops
it at the end. Skipped only when Node is not installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CLIENT = Path(__file__).resolve().parents[1] / "clients" / "typescript"


def test_typescript_client_against_a_running_service() -> None:
    node = shutil.which("node")
    if node is None:
        reason = "node is not installed: the TypeScript client's tests (clients/typescript) need Node 20+"
        print(reason)
        pytest.skip(reason)
    npm = shutil.which("npm")
    assert npm is not None, "node is installed but npm is not: install npm to run the TypeScript client's tests"
    bin_dir = Path(sys.executable).parent
    kagent_fork = shutil.which("kagent-fork", path=str(bin_dir)) or shutil.which("kagent-fork")
    assert kagent_fork is not None, "kagent-fork is not installed (pip install -e .)"
    env = {**os.environ, "KAGENT_FORK_BIN": kagent_fork, "KAGENT_FORK_PYTHON": sys.executable}

    def run(*args: str, timeout: int) -> None:
        done = subprocess.run(
            [npm, *args], cwd=CLIENT, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        assert done.returncode == 0, f"npm {' '.join(args)} failed:\n{done.stdout[-8000:]}\n{done.stderr[-4000:]}"

    if not (CLIENT / "node_modules" / ".bin" / "tsc").exists():
        run("ci", "--ignore-scripts", "--no-audit", "--no-fund", timeout=300)
    run("test", timeout=600)


def test_a_missing_kagent_fork_says_how_to_get_one(tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    env = {**os.environ, "KAGENT_FORK_BIN": str(tmp_path / "no-such-kagent-fork")}
    done = subprocess.run(
        [node, "scripts/run-tests.mjs"], cwd=CLIENT, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1 and "does not exist" in done.stderr and "./scripts/test" in done.stderr


def test_the_package_builds_when_installed_and_says_npm_ci() -> None:
    import json

    package = json.loads((CLIENT / "package.json").read_text())
    assert package["scripts"]["prepare"] == package["scripts"]["build"]  # npm install <path> compiles it
    assert "npm ci" in (CLIENT / "README.md").read_text()
