"""infra/: the GPU work-pool base job templates are valid Prefect templates that render to one GPU
request per flow run; the compose file and the Dockerfile hold what infra/README.md promises."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from prefect.server.schemas.actions import validate_base_job_template
from prefect.utilities.templating import apply_values

INFRA = Path(__file__).resolve().parents[2] / "infra"


def _template(kind: str) -> dict:
    return json.loads((INFRA / f"{kind}-gpu-job-template.json").read_text())


def _render(template: dict, **values) -> dict:
    """The job configuration a worker gets: variable defaults, then job variables, placed into it."""
    defaults = {k: v["default"] for k, v in template["variables"]["properties"].items() if "default" in v}
    return apply_values(template["job_configuration"], {**defaults, **values})


@pytest.mark.parametrize("kind", ["docker", "kubernetes"])
def test_template_is_a_valid_base_job_template(kind):
    template = _template(kind)
    assert validate_base_job_template(template) == template  # every placeholder is a declared variable
    properties = template["variables"]["properties"]
    assert {"image", "env", "gpu_count"} <= set(properties)
    assert "command" in template["job_configuration"]  # the worker fills in the flow-run command


def test_kubernetes_job_requests_its_own_gpus():
    manifest = _render(_template("kubernetes"), gpu_count=2)["job_manifest"]
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert container["resources"]["requests"]["nvidia.com/gpu"] == 2
    assert container["image"].endswith("rlanything-gpu:latest")
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/srv/rlanything/runs", "/dev/shm"}
    assert manifest["spec"]["backoffLimit"] == 0  # a failed stage fails its flow run; Prefect decides retries


def test_docker_container_gets_gpus_through_a_device_request():
    config = _render(_template("docker"))
    (request,) = config["container_create_kwargs"]["device_requests"]
    assert request == {"driver": "nvidia", "count": -1, "capabilities": [["gpu"]]}
    assert config["volumes"] == ["/srv/rlanything/runs:/srv/rlanything/runs"]
    assert config["env"]["HF_HUB_OFFLINE"] == "1"


def test_compose_has_the_servers_and_their_stores():
    compose = yaml.safe_load((INFRA / "compose.yaml").read_text())
    services = compose["services"]
    assert {"postgres", "minio", "minio-buckets", "mlflow", "prefect-server"} <= set(services)
    mlflow_cmd = " ".join(services["mlflow"]["command"])
    assert "postgresql://" in mlflow_cmd and "--artifacts-destination s3://" in mlflow_cmd
    assert services["prefect-server"]["environment"]["PREFECT_API_DATABASE_CONNECTION_URL"].startswith(
        "postgresql+asyncpg://")
    for service in services.values():  # nothing listens beyond this host by default
        assert all(port.startswith("127.0.0.1:") for port in service.get("ports", []))


def test_gpu_image_installs_the_project_with_the_gpu_extra():
    dockerfile = (INFRA / "Dockerfile.gpu").read_text()
    assert dockerfile.startswith("#") and "\nFROM pytorch/pytorch:" in dockerfile and "cuda" in dockerfile
    assert '-e ".[gpu]"' in dockerfile and "vllm" in dockerfile and "deepspeed" in dockerfile
