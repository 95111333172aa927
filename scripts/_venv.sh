# Sourced by scripts/serve and scripts/test: make .venv with Python 3.11+ and install the project into it
# (editable, with the extra named by $1). The install is skipped when nothing it depends on changed since the
# last one: .venv/.installed-<extra> holds the hash of pyproject.toml, this checkout's path and .venv's Python.
# The code itself needs no reinstall (an editable install reads the checkout); a new dependency, entry point
# or version in pyproject.toml does, and gets it. KAGENT_FORK_REINSTALL=1 installs anyway.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "kagent-fork needs Python 3.11 or newer")'
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
    .venv/bin/python -m pip install --quiet --upgrade pip
fi
installed=".venv/.installed-$1"
wanted=$( { sha256sum pyproject.toml; pwd; .venv/bin/python -VV; } | sha256sum | cut -d' ' -f1)
if [ "${KAGENT_FORK_REINSTALL:-}" = 1 ] || [ ! -x .venv/bin/kagent-fork ] || [ ! -f "$installed" ] \
    || [ "$(cat "$installed")" != "$wanted" ]; then
    rm -f "$installed"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[$1]"
    echo "$wanted" > "$installed"
fi
