"""The project stands alone (issue 45): a fresh clone with nothing beside it sets itself up from its own files
and passes its tests, and no file in the repository reads or names anything outside it.

The clone is of the committed HEAD (in CI, the submitted main itself): uncommitted changes are not in it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()


def outside(name: str) -> re.Pattern[str]:
    """A path from the checkout to the folder `name` beside it, as a string or as pathlib parts."""
    quoted = rf"[\"']{re.escape(name)}[\"']"
    return re.compile(rf"\.\./{re.escape(name)}\b|\.parent\s*/\s*{quoted}|{quoted}\s*/\s*[\"']\w+[\"']")


def _tracked() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [name for name in listed.stdout.decode().split("\0") if name]


def test_no_file_in_the_repository_reaches_a_folder_beside_it() -> None:
    """Whatever lies beside this checkout (on a developer's machine or CI's: nothing on a user's), no tracked
    file reads or names it."""
    beside = [p.name for p in ROOT.parent.iterdir() if p.is_dir() and p != ROOT]
    patterns = [outside(name) for name in beside]
    found = []
    for name in _tracked():
        path = ROOT / name
        if name == THIS or not path.is_file() or path.stat().st_size > 5_000_000:
            continue
        text = path.read_bytes().decode("utf-8", "replace")
        found += [f"{name}: {m.group(0)}" for pattern in patterns for m in pattern.finditer(text)]
    assert not found, found


def test_the_check_sees_a_path_outside() -> None:
    pattern = outside("beside")
    caught = [
        'SAMPLES = ROOT.parent / "beside" / "samples"',
        "Path(__file__).resolve().parents[1].parent / 'beside'",
        "see ../beside/docs/api-contract.md",
    ]
    assert all(pattern.search(line) for line in caught)
    assert not pattern.search('SAMPLES = ROOT / "tests" / "fixtures" / "samples"')
    assert not pattern.search("beside the checkout, ../besides/x")


def test_a_fresh_clone_with_nothing_beside_it_runs_its_own_tests(tmp_path: Path) -> None:
    """README's test command in a clone made into an empty folder: it installs the locked versions into its
    own .venv and passes a focused run that reads the repository's JSON samples (no runtime is set up for it)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    clone = empty / "kagent-fork"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    assert sorted(p.name for p in empty.iterdir()) == ["kagent-fork"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VIRTUAL_ENV"))}
    focused = "test_tasks or test_support_conversations or test_no_file_in_the_repository_reaches"
    run = subprocess.run(
        ["./scripts/test", "-q", "-p", "no:cacheprovider", "-k", focused],
        cwd=clone, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    tail = (run.stdout + run.stderr)[-4000:]
    assert run.returncode == 0, tail
    passed = re.search(r"(\d+) passed", run.stdout)
    assert passed and int(passed.group(1)) >= 10 and " failed" not in run.stdout, tail
    assert not list(clone.glob(".venv-*")), "a focused run set up a runtime it does not use"
    shutil.rmtree(clone, ignore_errors=True)
