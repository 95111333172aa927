"""Render deploy/*.yaml from the chart with Helm's own engine (helm-python-sdk: Helm v4's Go SDK, no helm binary),
so that the kustomize manifests and the chart are one source: `scripts/render-deploy` writes them,
tests/test_helm_chart.py checks that the committed files are exactly this render."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

HELM = Path(__file__).resolve().parent
CHART = HELM / "kagent-fork"
DEPLOY = HELM.parent
VALUES = HELM / "kustomize-values.yaml"
RELEASE, NAMESPACE = "kagent-fork", "kagent"  # kagent's namespace, beside the Services the routes name

HEADER = (
    "# Rendered from deploy/helm/kagent-fork with deploy/helm/kustomize-values.yaml by scripts/render-deploy\n"
    "# (release kagent-fork, namespace kagent): change the chart or those values, then run the script.\n"
)


def render(values: dict[str, Any] | None = None, *, name: str = RELEASE, namespace: str = NAMESPACE) -> dict[str, str]:
    """The chart's templates rendered as `helm template` renders them (values.schema.json checked first), by
    template file name; NOTES.txt and templates that render nothing left out."""
    from helm_python import Chart

    with Chart.load(CHART) as chart:
        rendered = chart.render(values or {}, name=name, namespace=namespace, is_install=True)
    out = {}
    for path, text in rendered.items():
        file = path.rsplit("/", 1)[-1]
        if file != "NOTES.txt" and text.strip():
            out[file] = text
    return out


def deploy_files() -> dict[str, str]:
    """deploy/<file> as the chart renders it with kustomize-values.yaml."""
    values = yaml.safe_load(VALUES.read_text())
    return {file: HEADER + text.lstrip("\n") for file, text in sorted(render(values).items())}


def main() -> int:
    for file, text in deploy_files().items():
        (DEPLOY / file).write_text(text)
        print(f"deploy/{file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
