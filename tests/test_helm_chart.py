"""The Helm chart deploy/helm/kagent-fork, rendered by Helm's own engine (helm-python-sdk: Helm v4's Go SDK, offline,
values.schema.json checked first as `helm template` does) for each way to install it: every object validated against
Kubernetes' schemas (strict, as tests/test_deploy_manifests.py does deploy/), then asserted on as helm-unittest would.
deploy/*.yaml are this chart's render (scripts/render-deploy): checked here to be exactly it."""

from __future__ import annotations

import copy
import importlib.util
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from helm_python import lint
from helm_python.errors import HelmError

from service.config import Settings, from_env

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "kagent-fork"
_spec = importlib.util.spec_from_file_location("deploy_render", ROOT / "deploy" / "helm" / "render.py")
assert _spec and _spec.loader
render_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(render_module)

KUBERNETES_VERSIONS = sorted({"1.30", kubernetes_validate.latest_version()})  # the chart's kubeVersion, the newest
CRD_GROUPS = ("gateway.networking.k8s.io/", "kagent.dev/", "monitoring.coreos.com/", "route.openshift.io/")
ROUTES_ON = {
    "httpRoute": {"enabled": True, "parentRefs": [{"name": "gw", "namespace": "gateway-system"}],
                  "hostnames": ["kagent.example.com"]},
    "ingress": {"enabled": True, "tls": [{"secretName": "kagent-tls", "hosts": ["kagent.example.com"]}]},
    "openshiftRoute": {"enabled": True, "host": "kagent-fork.apps.example.com"},
    "metrics": {"serviceMonitor": {"enabled": True}},
    "mcp": {"exampleAgent": {"enabled": True}},
}  # fmt: skip
URL_FILE = {
    "database": {"postgres": {"urlFile": "/etc/kagent-fork/db/url"}},
    "volumes": [{"name": "db-url", "secret": {"secretName": "kagent-fork-db"}}],
    "volumeMounts": [{"name": "db-url", "mountPath": "/etc/kagent-fork/db", "readOnly": True}],
}
CASES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "url": {"database": {"postgres": {"url": "postgresql://kagent:pw@db.example.com:5432/kagent"}}},
    "urlFile": URL_FILE,
    "fromKagentRelease": {"database": {"postgres": {"fromKagentRelease": "my-kagent"}}},
    "routes-on": ROUTES_ON,
    "routes-off": {"mcp": {"remoteMCPServer": {"enabled": False}}, "pdb": {"enabled": False}},
    "three-replicas": {"replicaCount": 3, "pdb": {"minAvailable": None, "maxUnavailable": 1}},
    "everything-set": {
        **ROUTES_ON,
        "auth": {"mode": "trusted-proxy", "userIdClaim": "email",
                 "jwt": {"audience": "kagent", "secretRef": {"name": "jwt", "key": "hs256"}}},
        "mcpApps": {"secretRef": {"name": "kagent-fork"}},
        "replay": {"readOnlyTools": ["default", "kagent/tools/get_pods"], "trustedServers": ["kagent/tools"],
                   "serverNames": ["kagent/tools=http://tools.kagent:8084/mcp"]},
        "serviceAccount": {"annotations": {"iam.gke.io/gcp-service-account": "fork@p.iam.gserviceaccount.com"}},
        "env": [{"name": "EXTRA", "value": "1"}],
        "extraObjects": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "{{ .Release.Name }}-extra"}},
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: two\n  namespace: '{{ .Release.Namespace }}'\n",
        ],
    },
}  # fmt: skip


def render(values: dict[str, Any] | None = None, *, name: str = "kagent-fork") -> list[dict[str, Any]]:
    """Every object the chart renders for a `helm install NAME deploy/helm/kagent-fork -n kagent`."""
    texts = render_module.render(copy.deepcopy(values or {}), name=name, namespace="kagent")
    return [doc for text in texts.values() for doc in yaml.safe_load_all(text) if doc]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}"
    return found[0]


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (c,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return dict(c)


def env_of(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container(docs)["env"]}


def refused(values: dict[str, Any]) -> str:
    with pytest.raises(HelmError) as error:
        render(values)
    return str(error.value)


# --- every way to install it renders objects Kubernetes accepts ------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_every_rendered_object_is_valid_kubernetes(case: str) -> None:
    docs = render(CASES[case])
    checked = 0
    for doc in docs:
        assert doc["metadata"].get("namespace") == "kagent" or doc["kind"] == "ConfigMap", doc["kind"]
        if doc["apiVersion"].startswith(CRD_GROUPS):
            continue  # no bundled schema: asserted on below
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)
        checked += 1
    assert checked >= 3, "Deployment, Service and more were checked"


def test_the_chart_lints_clean_and_a_broken_render_would_be_refused() -> None:
    report = lint(str(CHART), strict=True, kube_version="v1.30.0")
    assert report["errors"] == [] and not [m for m in report["messages"] if m["severity"] >= 2], report
    deployment = one(render(), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsRoot"] = False
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[0], strict=True)


# --- the schema refuses what is not a value of the chart -------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"replicaCont": 2}, "replicaCont"),  # a typo at the top
        ({"database": {"postgres": {"ulr": "postgresql://x"}}}, "ulr"),  # a typo deep down
        ({"auth": {"mode": "oidc"}}, "mode"),
        ({"database": {"postgres": {"url": "mysql://x"}}}, "url"),
        ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
        ({"limits": {"maxForkDepth": 0}}, "maxForkDepth"),
        ({"turnMap": {"minTasks": "sometimes"}}, "minTasks"),
        ({"replay": {"readOnlyTools": ["a b"]}}, "readOnlyTools"),
    ],
)
def test_the_schema_refuses_a_typo_or_a_bad_value(values: dict[str, Any], named: str) -> None:
    assert named in refused(values)


def test_values_and_schema_name_the_same_keys() -> None:
    """values.yaml is the schema's example: every key it has is in the schema, and the schema has no key it lacks."""
    import json

    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(value: dict[str, Any], node: dict[str, Any], where: str) -> None:
        if node.get("additionalProperties") is not False:
            return
        assert set(value) == set(node["properties"]) - {"global"}, where
        for key, sub in value.items():
            if isinstance(sub, dict):
                walk(sub, node["properties"][key], f"{where}.{key}")

    walk(values, schema, "")


# --- the database, three ways ----------------------------------------------------------------------------------------


def test_by_default_the_url_is_made_from_kagents_bundled_database_secret() -> None:
    docs = render(CASES["fromKagentRelease"])
    env = container(docs)["env"]
    names = [e["name"] for e in env]
    assert env[names.index("KAGENT_POSTGRES_PASSWORD")]["valueFrom"] == {
        "secretKeyRef": {"name": "my-kagent-postgresql", "key": "POSTGRES_PASSWORD"}
    }
    assert names.index("KAGENT_POSTGRES_PASSWORD") < names.index("DATABASE_URL"), "$(VAR) needs it defined before"
    assert env[names.index("DATABASE_URL")]["value"] == (
        "postgresql://kagent:$(KAGENT_POSTGRES_PASSWORD)@my-kagent-postgresql.kagent.svc:5432/kagent?sslmode=disable"
    )
    assert "DATABASE_URL_FILE" not in names
    assert not [d for d in docs if d["kind"] in ("Role", "RoleBinding", "ClusterRole")], "a secretKeyRef needs no RBAC"


def test_url_and_url_file_win_over_kagents_release() -> None:
    env = env_of(render(CASES["url"]))
    assert env["DATABASE_URL"] == {"name": "DATABASE_URL", "value": "postgresql://kagent:pw@db.example.com:5432/kagent"}
    assert "KAGENT_POSTGRES_PASSWORD" not in env and "DATABASE_URL_FILE" not in env
    docs = render({**URL_FILE, "database": {"postgres": {**URL_FILE["database"]["postgres"], "url": "postgresql://x"}}})
    env = env_of(docs)
    assert env["DATABASE_URL_FILE"]["value"] == "/etc/kagent-fork/db/url"
    assert "DATABASE_URL" not in env and "KAGENT_POSTGRES_PASSWORD" not in env
    mounts = {m["mountPath"]: m for m in container(docs)["volumeMounts"]}
    assert mounts["/etc/kagent-fork/db"]["readOnly"] is True and "/tmp" in mounts
    volumes = {v["name"]: v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["db-url"]["secret"] == {"secretName": "kagent-fork-db"}


def test_a_release_without_a_database_fails_with_the_values_named() -> None:
    message = refused({"database": {"postgres": {"fromKagentRelease": ""}}})
    assert "database.postgres.url" in message and "fromKagentRelease" in message


# --- the service's settings ------------------------------------------------------------------------------------------


def _settings(docs: list[dict[str, Any]]) -> Settings:
    """The Settings the service builds from the rendered environment (secretKeyRefs and $(VAR)s stand for values)."""
    env = {}
    for e in container(docs)["env"]:
        value = e.get("value", "x" * 40)  # a Secret's value: long enough for the service's 32-byte keys
        env[e["name"]] = re.sub(r"\$\(([A-Z_]+)\)", lambda m: env.get(m.group(1), ""), value)
    return from_env(env)


def test_the_settings_default_to_the_services_own() -> None:
    """Every setting is written out, and the service reads each back as its own default, except the three the chart
    wires to kagent and to itself, and the disk the pod's /tmp gives answers waiting for slow readers."""
    settings = _settings(render())
    defaults = Settings()
    wired = {"database_url", "kagent_a2a_url", "replay_mcp_url", "response_disk_bytes"}
    for field in Settings.__dataclass_fields__:
        if field not in wired:
            assert getattr(settings, field) == getattr(defaults, field), field
    assert settings.kagent_a2a_url == "http://kagent-controller.kagent.svc:8083/api/a2a"
    assert settings.replay_mcp_url == "http://kagent-fork.kagent.svc:8083/replay/mcp"
    assert settings.database_url and settings.database_url.startswith("postgresql://kagent:")
    assert settings.response_disk_bytes == 384 * 1024 * 1024  # x 2 workers, within the 1Gi emptyDir


def test_every_variable_the_service_reads_is_a_value_of_the_chart() -> None:
    read = set(re.findall(r'env(?:\.get)?\(\s*"([A-Z0-9_]+)"', (ROOT / "service" / "config.py").read_text()))
    read |= set(re.findall(r'_int\(env, "([A-Z0-9_]+)"', (ROOT / "service" / "config.py").read_text()))
    read |= set(re.findall(r'_switch\(env, "([A-Z0-9_]+)"', (ROOT / "service" / "config.py").read_text()))
    assert {"AUTH_MODE", "DB_POOL_MAX_SIZE", "REPLAY_READ_ONLY_TOOLS", "DATABASE_URL_FILE"} <= read
    embedded_only = {"KAGENT_FORK_DATA_DIR", "USER_ID_CLAIM"}  # the demo's data; the older name of a claim
    env = env_of(render(CASES["everything-set"])) | env_of(render(CASES["urlFile"]))
    assert read - embedded_only <= set(env) | {"DATABASE_URL", "JWT_PUBLIC_KEY"}, read - embedded_only - set(env)
    assert "JWT_PUBLIC_KEY" in env_of(render({"auth": {"mode": "trusted-proxy", "jwt": {"publicKey": "PEM"}}}))


def test_set_values_reach_the_service() -> None:
    docs = render(CASES["everything-set"])
    env = env_of(docs)
    assert env["MCP_APP_SECRET"]["valueFrom"] == {"secretKeyRef": {"name": "kagent-fork", "key": "mcp-app-secret"}}
    assert env["JWT_SECRET"]["valueFrom"] == {"secretKeyRef": {"name": "jwt", "key": "hs256"}}
    assert env["REPLAY_TRUSTED_SERVERS"]["value"] == "kagent/tools"
    assert env["REPLAY_SERVER_NAMES"]["value"] == "kagent/tools=http://tools.kagent:8084/mcp"
    assert env["EXTRA"] == {"name": "EXTRA", "value": "1"}
    settings = _settings(docs)
    assert settings.auth_mode == "trusted-proxy" and settings.user_id_claim == "email"
    assert settings.jwt_audience == "kagent" and settings.replay_trusted_servers == ("http://tools.kagent:8084/mcp",)
    assert ("http://tools.kagent:8084/mcp", "get_pods") in settings.replay_read_only_tools
    off = _settings(render({"turnMap": {"minTasks": "off", "forkCopy": True}, "limits": {"maxForkEvents": 0}}))
    assert off.turn_map_min_tasks is None and off.turn_map_fork_copy and off.max_fork_events == 0


# --- the pod: kagent's security defaults, probes, labels, replicas ---------------------------------------------------


def test_the_pod_is_locked_down_as_kagents_are() -> None:
    docs = render()
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container(docs)["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsUser"] == 10001
    assert pod["automountServiceAccountToken"] is False
    assert one(docs, "ServiceAccount")["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == one(docs, "ServiceAccount")["metadata"]["name"]


def test_probes_ports_and_shutdown() -> None:
    c = container(render())
    assert c["startupProbe"]["httpGet"] == c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["ports"] == [{"name": "http", "containerPort": 8083, "protocol": "TCP"}]
    assert c["args"] == ["serve", "--host", "0.0.0.0", "--port", "8083", "--workers", "2"]
    custom = container(render({"readinessProbe": {"tcpSocket": {"port": "http"}}, "service": {"ports": {"port": 80,
                                "targetPort": 9000}}}))  # fmt: skip
    assert custom["readinessProbe"] == {"tcpSocket": {"port": "http"}}, "a probe value replaces the default"
    assert custom["ports"][0]["containerPort"] == 9000 and custom["args"][4] == "9000"


def test_every_object_is_labelled_part_of_kagent_and_selected_by_its_own_labels() -> None:
    docs = render(ROUTES_ON)
    for doc in docs:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/part-of"] == "kagent", doc["kind"]
        assert (
            labels["app.kubernetes.io/managed-by"] == "Helm" and labels["app.kubernetes.io/instance"] == "kagent-fork"
        )
    deployment = one(docs, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert one(docs, "Service")["spec"]["selector"].items() <= pod_labels.items()
    assert one(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert (
        one(docs, "ServiceMonitor")["spec"]["selector"]["matchLabels"].items()
        <= one(docs, "Service")["metadata"]["labels"].items()
    )
    podlabels = render({"podLabels": {"team": "ai", "app.kubernetes.io/name": "mine"}})
    labels = one(podlabels, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert labels["team"] == "ai" and labels["app.kubernetes.io/name"] == "kagent-fork", "selector labels win"


def test_two_replicas_keep_one_through_drains() -> None:
    docs = render()
    deployment, pdb = one(docs, "Deployment"), one(docs, "PodDisruptionBudget")
    assert deployment["spec"]["replicas"] == 2 and pdb["spec"] == {
        "minAvailable": 1,
        "selector": pdb["spec"]["selector"],
    }
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    (spread,) = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert one(render(CASES["three-replicas"]), "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    assert "must be below replicaCount" in refused({"replicaCount": 1})
    assert "mutually exclusive" in refused({"pdb": {"maxUnavailable": 1}})
    assert not [d for d in render({"replicaCount": 1, "pdb": {"enabled": False}}) if d["kind"] == "PodDisruptionBudget"]


def test_images_in_kagents_spelling() -> None:
    assert container(render())["image"] == "ghcr.io/kagent-dev/kagent-fork:0.1.0"
    assert container(render({"registry": "registry.local", "tag": "0.2.0"}))["image"] == (
        "registry.local/kagent-dev/kagent-fork:0.2.0"
    )
    image = {"registry": "mirror.io", "repository": "me/fork", "tag": "dev", "pullPolicy": "Always"}
    c = container(render({"registry": "registry.local", "tag": "0.2.0", "image": image}))
    assert c["image"] == "mirror.io/me/fork:dev" and c["imagePullPolicy"] == "Always"


# --- routes ----------------------------------------------------------------------------------------------------------


def test_routes_are_off_by_default_and_on_when_asked() -> None:
    kinds = {d["kind"] for d in render()}
    assert kinds == {"Deployment", "Service", "ServiceAccount", "PodDisruptionBudget", "RemoteMCPServer"}
    docs = render(ROUTES_ON)
    assert {"HTTPRoute", "Ingress", "Route", "ServiceMonitor", "Agent"} <= {d["kind"] for d in docs}
    route = one(docs, "HTTPRoute")
    assert route["spec"]["parentRefs"] == [{"name": "gw", "namespace": "gateway-system"}]
    assert [r["backendRefs"][0]["name"] for r in route["spec"]["rules"]] == [
        "kagent-fork",
        "kagent-fork",
        "kagent-ui",
    ]  # 8 matches a rule at most
    ingress = one(docs, "Ingress")
    assert ingress["spec"]["tls"] == [{"secretName": "kagent-tls", "hosts": ["kagent.example.com"]}]
    openshift = one(docs, "Route")
    assert openshift["spec"]["to"] == {"kind": "Service", "name": "kagent-fork"}
    assert openshift["spec"]["host"] == "kagent-fork.apps.example.com" and openshift["spec"]["tls"]["termination"] == (
        "edge"
    )
    assert "httpRoute.parentRefs" in refused({"httpRoute": {"enabled": True}})


def test_routes_without_kagents_ui_and_beside_another_kagent_release() -> None:
    values = {"kagent": {"fullname": "ai"}, "httpRoute": {**ROUTES_ON["httpRoute"], "kagentUi": False},
              "ingress": {"enabled": True, "kagentUi": False}}  # fmt: skip
    docs = render(values)
    assert [r["backendRefs"][0]["name"] for r in one(docs, "HTTPRoute")["spec"]["rules"]] == [
        "kagent-fork",
        "kagent-fork",
    ]
    paths = one(docs, "Ingress")["spec"]["rules"][0]["http"]["paths"]
    assert {p["backend"]["service"]["name"] for p in paths} == {"kagent-fork"}
    assert env_of(docs)["KAGENT_A2A_URL"]["value"] == "http://ai-controller.kagent.svc:8083/api/a2a"
    with_ui = render({"kagent": {"fullname": "ai"}, "ingress": {"enabled": True}})
    assert one(with_ui, "Ingress")["spec"]["rules"][0]["http"]["paths"][-1]["backend"]["service"]["name"] == "ai-ui"


def test_the_remote_mcp_server_follows_the_release_name() -> None:
    docs = render(ROUTES_ON, name="fork")
    server = one(docs, "RemoteMCPServer")
    assert server["metadata"]["name"] == "fork" and server["spec"]["url"] == "http://fork.kagent.svc:8083/mcp"
    (tool,) = one(docs, "Agent")["spec"]["declarative"]["tools"]
    assert tool["mcpServer"]["name"] == "fork"
    assert env_of(docs)["REPLAY_MCP_URL"]["value"] == "http://fork.kagent.svc:8083/replay/mcp"


def test_extra_objects_are_rendered_through_tpl() -> None:
    names = {d["metadata"]["name"] for d in render(CASES["everything-set"]) if d["kind"] == "ConfigMap"}
    assert names == {"kagent-fork-extra", "two"}


# --- deploy/ is this chart's render ----------------------------------------------------------------------------------


def test_deploy_manifests_are_the_charts_render() -> None:
    """deploy/*.yaml (kubectl apply -k deploy/) are exactly what scripts/render-deploy makes of the chart."""
    rendered = render_module.deploy_files()
    for file, text in rendered.items():
        assert (ROOT / "deploy" / file).read_text() == text, f"deploy/{file} differs: run scripts/render-deploy"
    hand_written = {"kustomization.yaml"}
    on_disk = {p.name for p in (ROOT / "deploy").glob("*.yaml")}
    assert on_disk == set(rendered) | hand_written, on_disk ^ (set(rendered) | hand_written)


# --- kagent's own chart: the values that wire kagent-fork in ---------------------------------------------------------

# The keys of kagent's chart these values use (helm/kagent/values.yaml and templates/ui-httproute.yaml on
# release/v0.10.x and main): ui.env is written into the UI container's env list; a ui.httpRoute rule takes
# matches, backendRefs, filters and timeouts, and a rule without backendRefs goes to kagent's UI Service.
KAGENT_UI_KEYS = {"env", "httpRoute"}
KAGENT_HTTPROUTE_KEYS = {"enabled", "labels", "annotations", "parentRefs", "hostnames", "rules"}
KAGENT_RULE_KEYS = {"matches", "backendRefs", "filters", "timeouts"}


def test_kagents_values_wire_the_ui_and_route_kagent_forks_calls() -> None:
    from tests.test_deploy_manifests import KAGENT_PATHS, KAGENT_UI, fork_operations, route_backend

    values = yaml.safe_load((ROOT / "deploy" / "helm" / "kagent-values.yaml").read_text())
    assert set(values) == {"ui"} and set(values["ui"]) <= KAGENT_UI_KEYS
    docs = render({"httpRoute": {"enabled": True, "parentRefs": [{"name": "gw"}]}})
    service = one(docs, "Service")
    url = f"http://{service['metadata']['name']}.kagent.svc:{service['spec']['ports'][0]['port']}"
    assert values["ui"]["env"] == [{"name": "KAGENT_FORK_URL", "value": url}]
    route = values["ui"]["httpRoute"]
    assert set(route) <= KAGENT_HTTPROUTE_KEYS and route["enabled"] is True
    assert all(set(rule) <= KAGENT_RULE_KEYS for rule in route["rules"])
    ours = one(docs, "HTTPRoute")["spec"]["rules"][0]
    assert route["rules"][0]["matches"] == ours["matches"], "the same matches as the chart's own HTTPRoute"
    # The route as kagent's chart renders it: a rule without backendRefs goes to kagent's UI Service.
    ui_ref = {"name": KAGENT_UI[0], "port": KAGENT_UI[1]}
    rendered = {"spec": {"rules": [{**r, "backendRefs": r.get("backendRefs", [ui_ref])} for r in route["rules"]]}}
    for method, path in fork_operations():
        assert route_backend(rendered, method, path) == ("kagent-fork", 8083), f"{method} {path}"
    for method, path in KAGENT_PATHS:
        assert route_backend(rendered, method, path) == KAGENT_UI, f"{method} {path}"
