"""scripts/_venv.sh (sourced by scripts/serve and scripts/test): the locked dependencies and the project are
installed into .venv when something they depend on changed (the lock, pyproject.toml, the checkout's place,
.venv's Python), or when the last install failed, and not at every start (issue 36: ./scripts/serve took
15-23 s against 6 s for the installed command).

The script runs for real, in a copy of the scripts and pyproject.toml; .venv's Python is a stand-in that writes
down each `pip install` it is asked for, so that a run costs milliseconds rather than a real install's 20 s."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STAND_IN = """#!/usr/bin/env bash
# .venv/bin/python for the test: `-VV` answers a version; `-m pip install` is written down (and fails while
# FAIL exists); anything else does nothing.
here="$(cd "$(dirname "$0")/../.." && pwd)"
case "$*" in
    -VV) echo "Python 3.11.99 (stand-in)" ;;
    "-m pip install"*)
        echo "$*" >> "$here/installs.log"
        [ -e "$here/FAIL" ] && exit 1
        printf '#!/bin/sh\\n' > "$here/.venv/bin/kagent-fork" && chmod +x "$here/.venv/bin/kagent-fork" ;;
esac
exit 0
"""


def _checkout(tmp: Path) -> Path:
    (tmp / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "_venv.sh", tmp / "scripts" / "_venv.sh")
    shutil.copy(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    shutil.copytree(ROOT / "requirements", tmp / "requirements")
    (tmp / ".venv" / "bin").mkdir(parents=True)
    python = tmp / ".venv" / "bin" / "python"
    python.write_text(STAND_IN)
    python.chmod(0o755)
    return tmp


def _source(checkout: Path, extra: str = "serve", **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f"source scripts/_venv.sh {extra}"], cwd=checkout, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHON": sys.executable, **env}, check=False,
    )  # fmt: skip


def _installs(checkout: Path) -> list[str]:
    """The lock each install installed (`pip install --require-hashes -r LOCK`), each followed by the project's
    own install with nothing resolved (`--no-deps --no-build-isolation -e .`)."""
    log = checkout / "installs.log"
    lines = log.read_text().splitlines() if log.exists() else []
    locks = []
    for lock, project in zip(lines[::2], lines[1::2], strict=True):
        assert " --require-hashes -r requirements/" in lock and project.endswith(
            " --no-deps --no-build-isolation -e ."
        ), lines
        locks.append(lock.rsplit(" ", 1)[-1])
    return locks


def test_the_project_is_installed_when_something_changed_and_only_then(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)
    assert _source(checkout).returncode == 0
    assert _installs(checkout) == ["requirements/serve.txt"]
    assert (checkout / ".venv" / ".installed-serve").is_file()
    # nothing changed: no install
    assert _source(checkout).returncode == 0 and len(_installs(checkout)) == 1
    # another extra is its own install
    assert _source(checkout, "test").returncode == 0 and _installs(checkout)[-1] == "requirements/test.txt"
    assert _source(checkout, "test").returncode == 0 and len(_installs(checkout)) == 2
    # pyproject.toml changed (a dependency, an entry point, the version): installed again, once
    with (checkout / "pyproject.toml").open("a") as f:
        f.write("\n# a change\n")
    assert _source(checkout).returncode == 0 and len(_installs(checkout)) == 3
    assert _source(checkout).returncode == 0 and len(_installs(checkout)) == 3
    # the lock changed (a deliberate upgrade by scripts/lock): installed again, once
    with (checkout / "requirements" / "serve.txt").open("a") as f:
        f.write("\n# an upgrade\n")
    assert _source(checkout).returncode == 0 and len(_installs(checkout)) == 4
    assert _source(checkout).returncode == 0 and len(_installs(checkout)) == 4
    # the command gone from .venv, or asked for: installed again
    (checkout / ".venv" / "bin" / "kagent-fork").unlink()
    assert _source(checkout).returncode == 0 and len(_installs(checkout)) == 5
    assert _source(checkout, KAGENT_FORK_REINSTALL="1").returncode == 0 and len(_installs(checkout)) == 6


def test_a_failed_install_is_tried_again(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)
    (checkout / "FAIL").touch()
    failed = _source(checkout)
    assert failed.returncode != 0 and not (checkout / ".venv" / ".installed-serve").exists()
    # the lock's install failed, and nothing was installed after it
    assert (checkout / "installs.log").read_text().count("pip install") == 1
    (checkout / "installs.log").unlink()
    (checkout / "FAIL").unlink()
    assert _source(checkout).returncode == 0 and len(_installs(checkout)) == 1
    assert (checkout / ".venv" / ".installed-serve").is_file()


def test_a_moved_checkout_is_installed_again(tmp_path: Path) -> None:
    """An editable install points at the checkout's path: a copy elsewhere must not use the old one's."""
    first = _checkout(tmp_path / "a")
    assert _source(first).returncode == 0
    moved = tmp_path / "b"
    shutil.copytree(first, moved, symlinks=True)
    assert _source(moved).returncode == 0 and len(_installs(moved)) == 2
