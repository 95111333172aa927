"""The built wheel carries what the service reads at run time (SQL, migrations, openapi.yaml), so the
Docker image, which installs only the wheel, works outside a checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_runs_outside_the_checkout(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--wheel-dir",
            str(tmp_path / "dist"),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("kagent_fork-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    needed = [
        "service/sql/queries/fragments.sql",
        "service/sql/queries/events.sql",
        "service/sql/migrations/0001_lineage.sql",
        "service/sql/kagent/schema.sql",
    ]
    page = {
        f"service/doors/ui/{name}"
        for name in ("index.html", "app.js", "experiments.js", "suites.js", "tools.js", "style.css")
    }
    page |= {f"service/doors/apps/{f}" for f in ("app.css", "bridge.js", "branches.html", "experiment.js")}
    assert set(needed) | {"service/openapi.yaml"} | page <= names
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    probe = (
        "import service.kagent.store, service.kagent.store.base, service.doors.api, service.kagent.migrate;"
        "import service.doors.explorer, service.doors.mcp_apps;"
        "print(service.kagent.store.base.sql_dir()); print(service.doors.api.openapi_path());"
        "service.kagent.store.Store('kagent_fork'); service.doors.explorer.page_file('app.js');"
        "service.doors.explorer.page_file('experiments.js');"
        "assert 'Bridge' in service.doors.mcp_apps.page('experiment')"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True, check=True
    )
    sql_dir, openapi = out.stdout.split()
    assert sql_dir.startswith(str(tmp_path / "site")) and openapi.startswith(str(tmp_path / "site"))
    help_text = subprocess.run(
        [sys.executable, "-m", "service", "--help"], env=env, cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    for command in ("serve", "fork", "rewind", "undo", "invocations", "tree", "show", "compare", "whatif", "job"):
        assert command in help_text
