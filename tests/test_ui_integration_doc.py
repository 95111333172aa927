"""docs/ui-integration.md's shell steps do what the page says, run for real where they can be without a cluster:
the Helm step's `jq` program keeps the UI's other `ui.env` entries; the `.gitignore` line and `git add -f` get the
vendored tarball committed past kagent's `*.tgz`; every tarball the page names is the client's version."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "ui-integration.md").read_text()
VERSION = json.loads((ROOT / "clients" / "typescript" / "package.json").read_text())["version"]
URL = {"name": "KAGENT_FORK_URL", "value": "http://kagent-fork.kagent.svc:8083"}
A = {"name": "A", "value": "1"}
B = {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}


def _jq_program() -> str:
    """The jq program of step 1, as the page gives it."""
    found = re.search(r"\| jq -c '(.*?)'\)", PAGE, re.S)
    assert found, "step 1 has no `helm get values ... | jq -c '...'`"
    return found.group(1)


@pytest.mark.parametrize(
    ("values", "env"),
    [
        ({}, [URL]),  # a release installed with the chart's defaults
        ({"ui": {"env": {}}}, [URL]),  # values.yaml's own `ui.env: {}` given back
        ({"ui": {"replicas": 2}}, [URL]),
        # the entries a release has are kept, in order; an older KAGENT_FORK_URL is replaced
        ({"ui": {"env": [A, {"name": "KAGENT_FORK_URL", "value": "old"}, B]}}, [A, B, URL]),
    ],
)
def test_the_helm_step_adds_the_variable_and_keeps_the_others(values: dict[str, object], env: list[object]) -> None:
    jq = shutil.which("jq")
    assert jq, "jq is missing: apt-get install jq (scripts/test does it as root)"
    done = subprocess.run(
        [jq, "-c", _jq_program()], input=json.dumps(values), capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == env
    assert "--reuse-values" in PAGE and '--set-json "ui.env=$env"' in PAGE


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=30, check=False)


def _kagent_checkout(tmp: Path) -> Path:
    """A repository laid out as kagent's, with its root .gitignore's `*.tgz` (line 208 on both lines) and the
    vendored tarball."""
    repo = tmp / "kagent"
    (repo / "ui" / "vendor").mkdir(parents=True)
    (repo / ".gitignore").write_text("node_modules\n\n## Helm\n*.tgz\n/tmp/\n")
    (repo / "ui" / "package.json").write_text("{}\n")
    (repo / "ui" / "vendor" / f"kagent-fork-client-{VERSION}.tgz").write_bytes(b"tarball")
    assert _git(repo, "init", "-q").returncode == 0
    return repo


def test_the_tarball_is_left_out_by_git_add_and_the_page_gets_it_in(tmp_path: Path) -> None:
    tarball = f"ui/vendor/kagent-fork-client-{VERSION}.tgz"
    repo = _kagent_checkout(tmp_path / "plain")
    _git(repo, "add", "-A")
    assert _git(repo, "ls-files", "ui/vendor").stdout == ""  # what the page warns of
    # the page's first way: git add -f
    forced = _kagent_checkout(tmp_path / "forced")
    assert f"git add -f {tarball}" in PAGE
    _git(forced, "add", "-f", tarball)
    assert _git(forced, "ls-files", "ui/vendor").stdout.strip() == tarball
    # the page's second way: its line after `*.tgz`, then git add as usual
    line = re.search(r"printf '(![^']+)\\n' >> \.gitignore", PAGE)
    assert line, "the page gives no .gitignore line"
    unignored = _kagent_checkout(tmp_path / "line")
    with (unignored / ".gitignore").open("a") as f:
        f.write(line.group(1) + "\n")
    (unignored / "chart.tgz").write_bytes(b"a chart")  # still ignored elsewhere, as kagent wants
    _git(unignored, "add", "-A")
    assert _git(unignored, "ls-files").stdout.split() == [".gitignore", "ui/package.json", tarball]


def test_every_tarball_named_is_the_clients_version() -> None:
    readme = (ROOT / "clients" / "typescript" / "README.md").read_text()
    named = set(re.findall(r"kagent-fork-client-(\d+\.\d+\.\d+)\.tgz", PAGE + readme))
    assert named == {VERSION}, f"the pages name {sorted(named)}; the client is {VERSION}"
    assert re.search(rf"kagent-fork client {re.escape(VERSION)}\b", PAGE), "'Verified in kagent's UI' names another"
