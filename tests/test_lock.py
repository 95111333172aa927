"""Installs that do not drift (issue 45): every dependency is locked at one version with its files' hashes
(requirements/serve.txt, requirements/test.txt, made by scripts/lock), and every way the project is installed
(scripts/serve, scripts/test and so .ci/run, the Dockerfile) installs exactly the lock."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([^\s;\\]+)(.*?)(?=^\S|\Z)", re.M | re.S)


def _locked(extra: str) -> dict[str, tuple[str, str]]:
    """Each locked package: its version and the text of its entry (hashes, markers)."""
    text = (ROOT / "requirements" / f"{extra}.txt").read_text()
    return {canonicalize_name(m.group(1)): (m.group(2), m.group(0)) for m in PIN.finditer(text)}


def _wanted(extra: str) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = list(project["dependencies"]) + list(project["optional-dependencies"].get(extra, []))
    build = [line for line in (ROOT / "requirements" / "build.in").read_text().splitlines() if line and line[0] != "#"]
    return [Requirement(name) for name in names + build]


@pytest.mark.parametrize("extra", ["serve", "test"])
def test_the_lock_pins_every_dependency_with_hashes_at_a_version_pyproject_allows(extra: str) -> None:
    locked = _locked(extra)
    assert len(locked) > 20
    for name, (_, entry) in locked.items():
        assert "--hash=sha256:" in entry, f"{name} is locked without a hash"
    for requirement in _wanted(extra):
        if requirement.marker and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{name} is not in requirements/{extra}.txt: run scripts/lock"
        assert requirement.specifier.contains(locked[name][0], prereleases=True), (name, locked[name][0])


def test_the_tests_run_on_the_locked_versions() -> None:
    """This environment is the lock's (scripts/test installed it): a version here that the lock does not name is
    an install that drifted."""
    locked = _locked("test")
    for name in ("msgspec", "litestar", "asyncpg", "uvicorn", "mcp", "a2a-sdk", "pytest"):
        assert version(name) == locked[name][0], name


def test_every_install_path_installs_the_lock() -> None:
    venv = (ROOT / "scripts" / "_venv.sh").read_text()
    assert '--require-hashes -r "$lock"' in venv and 'lock="requirements/$1.txt"' in venv
    assert "--no-deps --no-build-isolation -e ." in venv
    for script, extra in (("serve", "serve"), ("test", "test")):
        assert f'_venv.sh" {extra}' in (ROOT / "scripts" / script).read_text()
    assert "exec ./scripts/test" in (ROOT / ".ci" / "run").read_text()
    docker = (ROOT / "Dockerfile").read_text()
    assert docker.count("--require-hashes -r") == 2 and "requirements/serve.txt" in docker
    assert re.search(r"pip install --no-cache-dir --no-deps /tmp/\*\.whl", docker)
