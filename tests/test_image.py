"""The container image, built from the Dockerfile with buildah (no Docker daemon here) by
deploy/build-image.sh, then run once: /healthz, /readyz and a fork on its embedded demo database.

Where no container registry is reachable, the script first builds python:3.11-slim from Debian's
packages. scripts/test installs buildah and debootstrap when they are missing and it runs as root;
otherwise this fails, saying how (it is never skipped)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
TAG = "localhost/kagent-fork:test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_image_builds_and_serves() -> None:
    missing = [tool for tool in ("buildah", "debootstrap") if shutil.which(tool) is None]
    if missing or os.geteuid() != 0:
        pytest.fail(
            f"building the image needs root and {', '.join(missing) or 'buildah'}: apt-get install buildah debootstrap"
        )
    env = {**os.environ, "STORAGE_DRIVER": "vfs", "BUILDAH_ISOLATION": "chroot"}
    # The script's own smoke run included: a successful build ends saying so, with no error line
    built = subprocess.run(
        [str(ROOT / "deploy" / "build-image.sh"), TAG], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=1500, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    ending = built.stdout.strip().splitlines()[-1]
    errors = [line for line in (built.stdout + built.stderr).splitlines() if line.startswith("Error")]
    assert ending.startswith("smoke run passed") and errors == [], built.stdout[-3000:] + built.stderr[-3000:]
    user = subprocess.run(
        ["buildah", "inspect", "--format", "{{.OCIv1.Config.User}} {{.OCIv1.Config.Entrypoint}}", TAG],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert user == "10001 [kagent-fork]"
    # the Dockerfile's HEALTHCHECK survives (Docker's image format; OCI's has none)
    check = subprocess.run(
        ["buildah", "inspect", "--format", "{{.Docker.Config.Healthcheck}}", TAG],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "/readyz" in check, check

    container = subprocess.run(
        ["buildah", "from", "--pull-never", TAG], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    port = _free_port()
    server = subprocess.Popen(
        ["buildah", "run", "--env", "KAGENT_FORK_DATA_DIR=/home/kagent-fork/pgdata", container, "--",
         "kagent-fork", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "the image's service never got ready"
            time.sleep(0.5)
        assert httpx.get(f"{base}/healthz", timeout=5).json()["data"] == {"status": "ok"}
        fork = httpx.post(f"{base}/api/sessions/demo-v1-session/fork", json={}, timeout=30)
        assert fork.status_code == 201 and fork.json()["data"]["fork"]["parent_session_id"] == "demo-v1-session"
        assert httpx.get(f"{base}/ui/", timeout=5).status_code == 200
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        subprocess.run(["buildah", "rm", container], env=env, capture_output=True, check=False)
