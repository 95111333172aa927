"""The Kubernetes manifests in deploy/ (the Helm chart's render, tests/test_helm_chart.py), checked offline.

- Every built-in resource validates against the Kubernetes JSON schemas bundled in the
  kubernetes-validate package (strict: unknown fields are errors), for the oldest Kubernetes the
  manifests support and the newest the package knows; a broken manifest is refused.
- The Deployment keeps the promises of the docs: two replicas, probes on /healthz and /readyz,
  non-root, read-only root filesystem, no privilege escalation, no capabilities, DATABASE_URL made
  from kagent's own database Secret, a graceful-shutdown window longer than the service's.
- The Ingress and the HTTPRoute send every kagent-fork operation of openapi.yaml to kagent-fork
  and everything else, kagent's own session API included, to kagent's UI Service.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"

# preStop `sleep` needs Kubernetes 1.30 (beta, on by default); check the oldest and the newest.
OLDEST_KUBERNETES = "1.30"
KUBERNETES_VERSIONS = sorted({OLDEST_KUBERNETES, kubernetes_validate.latest_version()})

# kagent's Helm chart (release "kagent"): helm/kagent/templates/ui-service.yaml.
KAGENT_UI = ("kagent-ui", 8080)
KAGENT_FORK = "kagent-fork"
UVICORN_GRACEFUL_SHUTDOWN_SECONDS = 30  # service/doors/cli.py: timeout_graceful_shutdown
OPTIONAL_FILES = {"httproute.yaml", "servicemonitor.yaml"}  # not in kustomization.yaml


def load(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def manifests() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        found += [(path.name, doc) for doc in load(path)]
    return found


def one(kind: str, name: str | None = None) -> dict[str, Any]:
    docs = [d for _, d in manifests() if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(docs) == 1, f"expected one {kind} {name or ''} in deploy/, found {len(docs)}"
    return docs[0]


# Custom resources: no bundled schema; checked by the tests of their own below.
CRD_GROUPS = ("gateway.networking.k8s.io/", "kagent.dev/", "monitoring.coreos.com/")


def validate(doc: dict[str, Any], version: str) -> None:
    """Raise kubernetes_validate.ValidationError when doc is not a valid resource of its kind."""
    kubernetes_validate.validate(doc, version, strict=True)


def validate_file(path: Path, version: str) -> int:
    """Validate every resource of a file; return how many were checked against a schema."""
    checked = 0
    for doc in load(path):
        if doc.get("apiVersion", "").startswith(CRD_GROUPS):
            continue  # a CRD: no bundled schema; checked by test_httproute_* and test_mcp_* below
        validate(doc, version)
        checked += 1
    return checked


# --- schemas ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("path", sorted(p.name for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml"))
def test_manifest_is_valid_kubernetes(path: str, version: str) -> None:
    validate_file(DEPLOY / path, version)


def test_every_built_in_resource_is_schema_checked() -> None:
    kinds = {doc["kind"] for _, doc in manifests()}
    assert {"Deployment", "Service", "ServiceAccount", "Ingress", "PodDisruptionBudget", "HTTPRoute"} <= kinds
    checked = sum(validate_file(p, OLDEST_KUBERNETES) for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")
    crds = [d for _, d in manifests() if d["apiVersion"].startswith(CRD_GROUPS)]
    assert checked == len(manifests()) - len(crds) and len(crds) == 4  # HTTPRoute, ServiceMonitor, kagent's two


def _broken_deployments() -> list[tuple[str, dict[str, Any], str]]:
    """(what is wrong, the broken Deployment, where the schema must find it)."""

    def broken(change: str, edit: Any, where: str) -> tuple[str, dict[str, Any], str]:
        doc = copy.deepcopy(one("Deployment"))
        edit(doc)
        return change, doc, where

    def pod(doc: dict[str, Any]) -> dict[str, Any]:
        spec: dict[str, Any] = doc["spec"]["template"]["spec"]
        return spec

    c0 = "spec.template.spec.containers.0"
    return [
        broken("misspelled field", lambda d: d["spec"].update(replica=d["spec"].pop("replicas")), "spec"),
        broken("replicas as text", lambda d: d["spec"].update(replicas="two"), "spec.replicas"),
        broken(
            "port as text",
            lambda d: pod(d)["containers"][0]["ports"][0].update(containerPort="8083"),
            f"{c0}.ports.0.containerPort",
        ),
        broken("container without name", lambda d: pod(d)["containers"][0].pop("name"), c0),
        broken("env without name", lambda d: pod(d)["containers"][0]["env"][0].pop("name"), f"{c0}.env.0"),
        broken(
            "unknown securityContext field",
            lambda d: pod(d)["securityContext"].update(runAsRoot=False),
            "spec.template.spec.securityContext",
        ),
        broken(
            "probe path as list",
            lambda d: pod(d)["containers"][0]["livenessProbe"]["httpGet"].update(path=["/"]),
            f"{c0}.livenessProbe.httpGet.path",
        ),
    ]


@pytest.mark.parametrize(("change", "doc", "where"), _broken_deployments(), ids=[b[0] for b in _broken_deployments()])
def test_broken_deployment_is_refused(change: str, doc: dict[str, Any], where: str) -> None:
    with pytest.raises(kubernetes_validate.ValidationError) as refused:
        validate(doc, OLDEST_KUBERNETES)
    assert ".".join(str(p) for p in refused.value.path) == where, refused.value.message


def test_broken_manifest_file_is_refused(tmp_path: Path) -> None:
    good = (DEPLOY / "service.yaml").read_text()
    validate_file(DEPLOY / "service.yaml", OLDEST_KUBERNETES)
    bad = tmp_path / "service.yaml"
    bad.write_text(good.replace("port: 8083", "port: eighty-eighty-three"))
    assert bad.read_text() != good
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_file(bad, OLDEST_KUBERNETES)
    unknown = tmp_path / "ingress.yaml"
    unknown.write_text((DEPLOY / "ingress.yaml").read_text().replace("ingressClassName:", "ingressClass:"))
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_file(unknown, OLDEST_KUBERNETES)


# --- what the Deployment promises ------------------------------------------------------------------


def container() -> dict[str, Any]:
    containers = one("Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    c: dict[str, Any] = containers[0]
    return c


def dockerfile(instruction: str) -> str:
    lines = [line for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith(instruction + " ")]
    return lines[-1].removeprefix(instruction + " ").strip()


def test_deployment_runs_two_replicas_of_the_image() -> None:
    dep = one("Deployment", KAGENT_FORK)
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    c = container()
    assert c["image"] == "ghcr.io/kagent-dev/kagent-fork:0.1.0"
    assert c["args"] == ["serve", "--host", "0.0.0.0", "--port", "8083", "--workers", "2"]
    assert c["args"] == json.loads(dockerfile("CMD")), "the Deployment runs what the image runs by default"
    assert {"name": "http", "containerPort": 8083, "protocol": "TCP"} in c["ports"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_probes_use_the_health_endpoints() -> None:
    c = container()
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["startupProbe"]["httpGet"]["path"] == "/healthz"
    openapi = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    assert {"/healthz", "/readyz"} <= set(openapi["paths"])


def test_runs_as_non_root_with_a_read_only_root_filesystem() -> None:
    pod = one("Deployment")["spec"]["template"]["spec"]
    c = container()
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert dockerfile("USER") == "10001", "the image's user is the one the pod runs as"
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["runAsUser"] == 10001
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc.get("privileged", False) is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert pod["automountServiceAccountToken"] is False
    # The only writable place is an emptyDir on /tmp.
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts == {"/tmp": "tmp"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes["tmp"]


def test_database_url_comes_from_kagents_database_secret() -> None:
    """kagent's bundled database (release kagent): the password from its Secret kagent-postgresql, never in the
    manifest, put into the URL by the kubelet's $(VAR) expansion, which needs the variable defined before."""
    env = container()["env"]
    names = [e["name"] for e in env]
    password = env[names.index("KAGENT_POSTGRES_PASSWORD")]
    assert password["valueFrom"] == {"secretKeyRef": {"name": "kagent-postgresql", "key": "POSTGRES_PASSWORD"}}
    url = env[names.index("DATABASE_URL")]
    assert names.index("KAGENT_POSTGRES_PASSWORD") < names.index("DATABASE_URL")
    assert url["value"] == (
        "postgresql://kagent:$(KAGENT_POSTGRES_PASSWORD)@kagent-postgresql.kagent.svc:5432/kagent?sslmode=disable"
    )
    assert not any("secret" in str(e.get("value", "")).lower() for e in env), "no password in plain text"


def test_resources_and_graceful_shutdown() -> None:
    pod = one("Deployment")["spec"]["template"]["spec"]
    c = container()
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(c["resources"][kind]), f"resources.{kind} needs cpu and memory"
    pre_stop = c["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] == 40
    assert pod["terminationGracePeriodSeconds"] > pre_stop + UVICORN_GRACEFUL_SHUTDOWN_SECONDS
    cli = (ROOT / "service" / "doors" / "cli.py").read_text()
    assert f"timeout_graceful_shutdown={UVICORN_GRACEFUL_SHUTDOWN_SECONDS}" in cli


def test_held_answers_fit_the_pod() -> None:
    """Each worker's answers waiting for slow readers may hold RESPONSE_MEMORY_BYTES of memory and
    RESPONSE_DISK_BYTES of temporary files on /tmp: every worker's together must fit the memory limit (beside
    the workers' own ~120 MB each) and the emptyDir, whose overflow gets the pod evicted."""
    c = container()
    env = {e["name"]: int(e["value"]) for e in c["env"] if e["name"].startswith("RESPONSE_")}
    workers = int(c["args"][c["args"].index("--workers") + 1])
    units = {"Mi": 1 << 20, "Gi": 1 << 30}
    quantity = re.compile(r"(\d+)(Mi|Gi)")

    def size(text: str) -> int:
        match = quantity.fullmatch(text)
        assert match, text
        return int(match[1]) * units[match[2]]

    tmp = next(v for v in one("Deployment")["spec"]["template"]["spec"]["volumes"] if v["name"] == "tmp")
    assert workers * env["RESPONSE_DISK_BYTES"] < size(tmp["emptyDir"]["sizeLimit"])
    assert workers * (env["RESPONSE_MEMORY_BYTES"] + 120 * (1 << 20)) < size(c["resources"]["limits"]["memory"])


def test_service_and_disruption_budget_select_the_pods() -> None:
    labels = one("Deployment")["spec"]["template"]["metadata"]["labels"]
    svc = one("Service", KAGENT_FORK)
    assert svc["spec"]["selector"].items() <= labels.items()
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8083, "targetPort": "http", "protocol": "TCP"}]
    pdb = one("PodDisruptionBudget", KAGENT_FORK)
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["minAvailable"] < one("Deployment")["spec"]["replicas"]


def test_kustomization_lists_the_manifests() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    resources = kustomization["resources"]
    for name in resources:
        assert (DEPLOY / name).is_file(), f"kustomization.yaml names a missing file {name}"
    expected = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"} - OPTIONAL_FILES
    assert set(resources) == expected
    assert kustomization["namespace"] == "kagent"
    for _, doc in manifests():
        assert doc["metadata"]["namespace"] == "kagent", "beside kagent's Services, which the routes name"
    image = container()["image"].rsplit(":", 1)
    assert kustomization["images"] == [{"name": image[0], "newTag": image[1]}]


# --- routing ---------------------------------------------------------------------------------------

# kagent's own REST session routes (release 0.10.x, go/core/internal/httpserver/server.go), which
# must keep reaching kagent, and other paths of kagent's UI.
KAGENT_PATHS = [
    ("GET", "/api/sessions"),
    ("POST", "/api/sessions"),
    ("GET", "/api/sessions/agent/kagent/k8s-agent"),
    ("GET", "/api/sessions/s-1"),
    ("PATCH", "/api/sessions/s-1"),
    ("DELETE", "/api/sessions/s-1"),
    ("GET", "/api/sessions/s-1/tasks"),
    ("POST", "/api/sessions/s-1/events"),
    ("POST", "/api/sessions/s-1/shares"),
    ("DELETE", "/api/sessions/s-1/shares/t-1"),
    ("GET", "/api/sessions/s-1/forkz"),
    ("GET", "/api/sessions/s-1/fork/x"),
    ("POST", "/api/sessions/s-1/rewinds/r-1/undo/x"),
    ("GET", "/api/agents"),
    ("GET", "/agents/kagent/k8s-agent/chat/s-1"),
    ("GET", "/"),
    ("POST", "/a2a/kagent/k8s-agent/"),
]


def fork_operations() -> list[tuple[str, str]]:
    """Every (method, concrete path) of kagent-fork's API under /api/sessions, /api/whatif and /api/experiments, from
    openapi.yaml, and the MCP endpoint."""
    openapi = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    ops = [("POST", "/mcp"), ("GET", "/mcp"), ("DELETE", "/mcp")]  # streamable HTTP uses all three
    for template, item in openapi["paths"].items():
        if not template.startswith(
            ("/api/sessions/", "/api/whatif/", "/api/experiments/", "/api/fork-explorer/", "/ui/")
        ):
            continue
        path = re.sub(r"\{[^}]+\}", "s-1", template)
        ops += [(method.upper(), path) for method in item if method in ("get", "post", "put", "patch", "delete")]
    assert len(ops) >= 6
    return ops


def ingress_backend(ingress: dict[str, Any], path: str) -> tuple[str, int | str]:
    """The backend ingress-nginx picks with use-regex: paths are regexes anchored at the start,
    case-insensitive, tried longest first; the first match wins."""
    candidates = []
    for rule in ingress["spec"]["rules"]:
        candidates += rule["http"]["paths"]
    for p in sorted(candidates, key=lambda p: len(p["path"]), reverse=True):
        if re.match(p["path"], path, re.IGNORECASE):
            service = p["backend"]["service"]
            return service["name"], service["port"].get("number", service["port"].get("name"))
    raise AssertionError(f"no Ingress path matches {path}")


def test_ingress_uses_regex_paths_the_api_server_accepts() -> None:
    ingress = one("Ingress")
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/use-regex"] == "true"
    assert ingress["spec"]["ingressClassName"] == "nginx"
    for rule in ingress["spec"]["rules"]:
        for p in rule["http"]["paths"]:
            assert p["path"].startswith("/"), "the API server refuses a path that does not start with /"
            assert p["pathType"] == "ImplementationSpecific", "Exact and Prefix paths cannot be regexes"
            re.compile(p["path"])


def test_ingress_sends_kagent_fork_calls_to_kagent_fork() -> None:
    ingress = one("Ingress")
    port_names = {p["name"] for p in one("Service", KAGENT_FORK)["spec"]["ports"]}
    for _method, path in fork_operations():
        name, port = ingress_backend(ingress, path)
        assert name == KAGENT_FORK, path
        assert port in port_names | {8083}
        assert ingress_backend(ingress, path.upper().replace("/S-1", "/s-1")) == (name, port), "case-insensitive"


def test_ingress_sends_everything_else_to_kagent() -> None:
    ingress = one("Ingress")
    for _method, path in KAGENT_PATHS:
        assert ingress_backend(ingress, path) == KAGENT_UI, path


def route_backend(route: dict[str, Any], method: str, path: str) -> tuple[str, int]:
    """The backend an HTTPRoute picks: regex rules (with their method) first, then the longest prefix.
    A regex must agree under full-match (Envoy) and search semantics."""
    regex, prefix = [], []
    for rule in route["spec"]["rules"]:
        ref = rule["backendRefs"][0]
        for match in rule["matches"]:
            (regex if match["path"]["type"] == "RegularExpression" else prefix).append((match, ref))
    for match, ref in regex:
        pattern = match["path"]["value"]
        full, searched = re.fullmatch(pattern, path) is not None, re.search(pattern, path) is not None
        assert full == searched, f"{pattern} matches {path} differently under full-match and search"
        if full and match.get("method", method) == method:
            return ref["name"], ref["port"]
    for match, ref in sorted(prefix, key=lambda m: len(m[0]["path"]["value"]), reverse=True):
        if path.startswith(match["path"]["value"]):
            return ref["name"], ref["port"]
    raise AssertionError(f"no HTTPRoute rule matches {method} {path}")


def test_httproute_is_well_formed() -> None:
    route = one("HTTPRoute")
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["spec"]["parentRefs"] and route["spec"]["hostnames"]
    assert len(route["spec"]["rules"]) <= 16
    allowed = {"matches", "backendRefs", "filters", "timeouts", "name", "sessionPersistence"}
    for rule in route["spec"]["rules"]:
        assert set(rule) <= allowed
        assert 1 <= len(rule["matches"]) <= 8, "Gateway API allows at most 8 matches per rule"
        for match in rule["matches"]:
            assert set(match) <= {"path", "method", "headers", "queryParams"}
            assert match["path"]["type"] in ("Exact", "PathPrefix", "RegularExpression")
            assert match["path"]["value"].startswith(("/", "^/"))
            assert match.get("method", "GET") in ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
            if match["path"]["type"] == "RegularExpression":
                re.compile(match["path"]["value"])
        for ref in rule["backendRefs"]:
            assert set(ref) <= {"name", "port", "weight", "kind", "group", "namespace", "filters"}
            assert isinstance(ref["port"], int)
    ingress = one("Ingress")
    assert route["spec"]["hostnames"] == [r["host"] for r in ingress["spec"]["rules"]], "same host as the Ingress"


def test_httproute_sends_exactly_the_kagent_fork_calls_to_kagent_fork() -> None:
    route = one("HTTPRoute")
    operations = fork_operations()
    for method, path in operations:
        assert route_backend(route, method, path) == (KAGENT_FORK, 8083), f"{method} {path}"
        for other in ("GET", "POST", "DELETE"):
            if (other, path) not in operations:
                assert route_backend(route, other, path) == KAGENT_UI, f"{other} {path} is not kagent-fork's"
    for method, path in KAGENT_PATHS:
        assert route_backend(route, method, path) == KAGENT_UI, f"{method} {path}"


def readme_routing() -> list[tuple[str, set[str], bool]]:
    """deploy/README.md's routing table: (path, methods or {"any"}, routed to kagent-fork from outside)."""
    text = (DEPLOY / "README.md").read_text().split("\n## Routing\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in text.splitlines():
        row = re.fullmatch(r"\| `(/[^`]*)` \| ([^|]+) \| ([^|]+) \|", line)
        if row:
            methods = {m.strip() for m in row[2].split(",")}
            rows.append((row[1], methods, row[3].startswith(KAGENT_FORK)))
    return rows


def served_routes() -> dict[str, set[str]]:
    """Every path the app serves, with its methods (a mount: {"any"}), spelled as the table spells it."""
    from service.app import create_app
    from service.config import from_env

    app = create_app(from_env({"DATABASE_URL": "postgresql://nowhere/none"}), "postgresql://nowhere/none")
    served: dict[str, set[str]] = {}
    for path, handlers in app.route_handler_method_map.items():
        shown = re.sub(r"\{(\w+):\w+\}", r"{\1}", path)
        shown = "/ui/" if shown == "/ui" else shown  # the page is declared, linked and routed as /ui/
        methods = set(handlers) - {"OPTIONS"}
        served[shown + "/..." if methods == {"asgi"} and shown != "/mcp" else shown] = (
            {"any"} if methods == {"asgi"} else methods
        )
    return served


def test_the_routing_table_names_every_path_the_service_serves() -> None:
    """Issue 45, 5c: deploy/README.md's table is the app's routes, path for path and method for method (it had
    left out /judge, /votes, /discard, /discard/undo, /api/fork-explorer/* and /ui/)."""
    table = readme_routing()
    assert len({path for path, _, _ in table}) == len(table), "a path listed twice"
    assert {path: methods for path, methods, _ in table} == served_routes()


def test_the_routing_table_says_truly_where_each_path_goes() -> None:
    """A row routed to kagent-fork reaches it through the Ingress and the HTTPRoute, for each of its methods; a row
    not routed goes to kagent's UI."""
    ingress, route = one("Ingress"), one("HTTPRoute")
    for path, methods, routed in readme_routing():
        concrete = re.sub(r"\{[^}]+\}", "s-1", path).replace("/...", "/kagent/agent/server")
        for method in sorted(methods - {"any"} or {"GET", "POST", "DELETE"}):
            if routed:
                assert ingress_backend(ingress, concrete)[0] == KAGENT_FORK, (method, path)
                assert route_backend(route, method, concrete) == (KAGENT_FORK, 8083), (method, path)
            else:
                assert ingress_backend(ingress, concrete) == KAGENT_UI, (method, path)
                assert route_backend(route, method, concrete) == KAGENT_UI, (method, path)


# --- kagent's MCP resources -------------------------------------------------------------------------


def test_mcp_server_and_agent_name_the_served_tools() -> None:
    """The RemoteMCPServer reaches the service's /mcp, and the example Agent asks for tools the service
    serves, with the identity headers forwarded (kagent's RemoteMCPServer/Agent v1alpha2 fields): every tool
    the agent may call, the two views (MCP Apps) among them, and none of the app-only tools (kagent lets
    the views call those, never the agent)."""
    from service.doors import mcp_apps, mcp_tools

    server = one("RemoteMCPServer", "kagent-fork")
    assert server["apiVersion"] == "kagent.dev/v1alpha2" and server["spec"]["protocol"] == "STREAMABLE_HTTP"
    service = one("Service", KAGENT_FORK)
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "http")
    assert server["spec"]["url"] == f"http://{KAGENT_FORK}.kagent.svc:{port}/mcp"
    assert set(server["spec"]) <= {"description", "protocol", "url", "timeout", "sseReadTimeout", "headersFrom",
                                   "terminateOnClose", "tls", "allowedNamespaces"}  # fmt: skip
    agent = one("Agent", "branch-explorer")
    assert agent["apiVersion"] == "kagent.dev/v1alpha2" and agent["spec"]["type"] == "Declarative"
    (tool,) = agent["spec"]["declarative"]["tools"]
    assert tool["type"] == "McpServer" and tool["mcpServer"]["kind"] == "RemoteMCPServer"
    assert tool["mcpServer"]["name"] == server["metadata"]["name"]
    mcp = mcp_tools.mcp_server(lambda: None)  # type: ignore[arg-type,return-value]
    mcp_apps.register(mcp)
    listed = asyncio.run(mcp.list_tools())
    served = {t.name for t in listed if (t.meta or {}).get("ui", {}).get("visibility") != ["app"]}
    assert set(tool["mcpServer"]["toolNames"]) == served and {"show_branches", "show_experiment"} <= served
    assert {h.lower() for h in tool["mcpServer"]["allowedHeaders"]} == {"x-user-id", "authorization"}


def test_prometheus_scrapes_the_metrics_endpoint() -> None:
    annotations = one("Deployment")["spec"]["template"]["metadata"]["annotations"]
    port = next(p["containerPort"] for p in container()["ports"] if p["name"] == "http")
    assert annotations == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(port),
        "prometheus.io/path": "/metrics",
    }


def test_the_dockerfile_matches_the_package() -> None:
    """No image is built here (no container registry is reachable, so no base image): the Dockerfile's
    instructions are checked against the package instead."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert json.loads(dockerfile("ENTRYPOINT")) == list(project["project"]["scripts"])  # ["kagent-fork"]
    assert dockerfile("EXPOSE") == "8083" == str(container()["ports"][0]["containerPort"])
    text = (ROOT / "Dockerfile").read_text()
    assert "HEALTHCHECK " in text and "'http://127.0.0.1:8083/readyz'" in text  # the readiness the pod probes
    copied = {part for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("COPY ")
              for part in line.split()[1:-1] if not part.startswith("--")}  # fmt: skip
    forced = project["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    needed = {"pyproject.toml", "README.md", "service", *forced}  # what the wheel is built from
    assert needed <= copied, needed - copied


def test_the_service_monitor_scrapes_the_service_port() -> None:
    monitor = one("ServiceMonitor", KAGENT_FORK)
    service = one("Service", KAGENT_FORK)
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    (endpoint,) = monitor["spec"]["endpoints"]
    port = next(p for p in service["spec"]["ports"] if p["name"] == endpoint["port"])
    assert port["targetPort"] in ("http", container()["ports"][0]["containerPort"])
    assert endpoint["path"] == "/metrics"
