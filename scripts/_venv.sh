# Sourced by scripts/serve and scripts/test: make .venv with Python 3.11+ and install into it exactly the
# versions locked in requirements/$1.txt (every dependency pinned with its hashes; scripts/lock makes it), then
# the project itself (editable, no dependencies of its own resolved). The install is skipped when nothing it
# depends on changed since the last one: .venv/.installed-<extra> holds the hash of the lock, pyproject.toml,
# this checkout's path and .venv's Python. The code itself needs no reinstall (an editable install reads the
# checkout). KAGENT_FORK_REINSTALL=1 installs anyway.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "kagent-fork needs Python 3.11 or newer")'
lock="requirements/$1.txt"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
installed=".venv/.installed-$1"
wanted=$( { sha256sum "$lock" pyproject.toml; pwd; .venv/bin/python -VV; } | sha256sum | cut -d' ' -f1)
if [ "${KAGENT_FORK_REINSTALL:-}" = 1 ] || [ ! -x .venv/bin/kagent-fork ] || [ ! -f "$installed" ] \
    || [ "$(cat "$installed")" != "$wanted" ]; then
    rm -f "$installed"
    # --require-hashes: a version or a file that is not the locked one is refused, not installed.
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes -r "$lock"
    # The build backend is in the lock, so the project's own install fetches nothing unpinned.
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
    echo "$wanted" > "$installed"
fi
