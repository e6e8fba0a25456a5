"""The production topology's ``docker-compose.yaml``, validated offline by Debian's ``docker-compose`` (1.29:
``config`` needs no Docker engine), and its ``Dockerfile``: the services of Airflow's CeleryExecutor layout
plus a Spark master and two workers, the executor, the published ports (127.0.0.1 only), the log volume
the Spark workers share with the Celery worker, the ``spark_default`` connection and the image.

Without ``docker-compose`` the compose tests are skipped with the reason; with ``CI=true`` that is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yaml"
DOCKERFILE = REPO / "Dockerfile"
AIRFLOW_SERVICES = {"airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
                    "airflow-worker", "airflow-init"}
SPARK_WORKERS = {"spark-worker-1", "spark-worker-2"}
SERVICES = {"postgres", "redis", *AIRFLOW_SERVICES, "spark-master", *SPARK_WORKERS}
LOG_VOLUME_PATH = "/var/lib/kafkalog"  # where the Celery worker and the Spark workers mount the log volume
SPARK_MASTER_URL = "spark://spark-master:7077"
# Variables the compose file interpolates: a developer's shell must not change what the tests see.
INTERPOLATED = ("KAFKALOG_", "AIRFLOW_", "SPARK_", "POSTGRES_", "_AIRFLOW_")


def docker_compose() -> str:
    path = shutil.which("docker-compose")
    if path is None:
        reason = "docker-compose not found (Debian: apt-get install docker-compose; `make system-packages`)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason + "; CI must validate docker-compose.yaml")
        pytest.skip(reason)
    return path


def compose_config(tmp_path: Path, **variables: str) -> dict[str, Any]:
    """``docker-compose config`` of the file (interpolated, anchors merged, validated), parsed."""
    env_file = tmp_path / "empty.env"  # not the repo's .env, if someone has one
    env_file.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(INTERPOLATED) and not k.startswith("COMPOSE_")}
    env.update(variables)
    done = subprocess.run([docker_compose(), "-f", str(COMPOSE_FILE), "--env-file", str(env_file), "config"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"docker-compose config failed:\n{done.stderr}"
    doc: dict[str, Any] = yaml.safe_load(done.stdout)
    return doc


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return compose_config(tmp_path_factory.mktemp("compose"))


def services(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = config["services"]
    return result


def env_of(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # KEY=VALUE form
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def command_of(service: dict[str, Any]) -> list[str]:
    command = service.get("command") or []
    return command.split() if isinstance(command, str) else [str(c) for c in command]


def mounts(service: dict[str, Any]) -> list[dict[str, Any]]:
    """The service's volumes as (source, target, read_only) dicts, from the short or the long syntax."""
    out = []
    for volume in service.get("volumes") or []:
        if isinstance(volume, str):
            source, target, *mode = volume.split(":")
            out.append({"source": source, "target": target, "read_only": "ro" in "".join(mode).split(",")})
        else:
            out.append({"source": volume.get("source"), "target": volume["target"],
                        "read_only": bool(volume.get("read_only"))})
    return out


def log_volume_mount(service: dict[str, Any]) -> dict[str, Any]:
    found = [m for m in mounts(service) if m["target"] == LOG_VOLUME_PATH]
    assert len(found) == 1, f"no single mount at {LOG_VOLUME_PATH}: {mounts(service)}"
    return found[0]


def published(service: dict[str, Any]) -> list[tuple[str | None, str]]:
    """(host IP, host port) of each published port, from the short or the long syntax."""
    out: list[tuple[str | None, str]] = []
    for port in service.get("ports") or []:
        if isinstance(port, dict):
            if port.get("published") is not None:
                out.append((port.get("host_ip"), str(port["published"])))
            continue
        spec = str(port).split("/")[0]
        parts = spec.rsplit(":", 2)
        if len(parts) == 3:
            out.append((parts[0].strip("[]"), parts[1]))
        else:  # "8080" (an ephemeral host port) or "8080:8080": every interface
            out.append((None, parts[0] if len(parts) == 2 else ""))
    return out


# --- the compose file ------------------------------------------------------------------------------------
def test_every_service_of_the_topology_is_there(config: dict[str, Any]) -> None:
    assert SERVICES <= set(services(config)), sorted(SERVICES - set(services(config)))
    workers = {name for name, s in services(config).items()
               if "org.apache.spark.deploy.worker.Worker" in command_of(s)}
    assert workers == SPARK_WORKERS
    assert "org.apache.spark.deploy.master.Master" in command_of(services(config)["spark-master"])


def test_airflow_runs_with_the_celery_executor_everywhere(config: dict[str, Any]) -> None:
    airflow = {name: s for name, s in services(config).items() if any(
        k.startswith("AIRFLOW__") for k in env_of(s)) or command_of(s)[:1] == ["airflow"]}
    assert set(airflow) == AIRFLOW_SERVICES
    for name, service in airflow.items():
        env = env_of(service)
        assert env.get("AIRFLOW__CORE__EXECUTOR") == "CeleryExecutor", name
        assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://:@redis:6379/"), name
        assert re.match(r"db\+postgresql://[^@]+@postgres/", env["AIRFLOW__CELERY__RESULT_BACKEND"]), name
        assert re.match(r"postgresql\+psycopg2://[^@]+@postgres/", env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]), name
    assert command_of(services(config)["airflow-worker"]) == ["airflow", "celery", "worker"]
    for name, component in (("airflow-apiserver", "api-server"), ("airflow-scheduler", "scheduler"),
                            ("airflow-dag-processor", "dag-processor"), ("airflow-triggerer", "triggerer")):
        assert command_of(services(config)[name])[:2] == ["airflow", component]


def test_published_ports_are_bound_to_loopback_only(config: dict[str, Any]) -> None:
    every = {name: published(s) for name, s in services(config).items()}
    for name, ports in every.items():
        for host_ip, port in ports:
            assert host_ip == "127.0.0.1", f"{name} publishes port {port} on {host_ip or 'every interface'}"
        assert services(config)[name].get("network_mode") != "host", name
    assert ("127.0.0.1", "8080") in every["airflow-apiserver"]
    assert every["postgres"] == [] and every["redis"] == []  # reached over the compose network only


def test_published_ports_stay_on_loopback_when_their_numbers_change(tmp_path: Path) -> None:
    config = compose_config(tmp_path, AIRFLOW_API_PORT="18080", SPARK_MASTER_UI_PORT="18090")
    assert published(services(config)["airflow-apiserver"]) == [("127.0.0.1", "18080")]
    assert published(services(config)["spark-master"]) == [("127.0.0.1", "18090")]


def test_spark_workers_and_the_airflow_worker_share_the_log_volume_at_one_path(config: dict[str, Any]) -> None:
    worker = services(config)["airflow-worker"]
    shared = log_volume_mount(worker)
    assert not shared["read_only"]
    assert shared["source"] in config.get("volumes", {}), "the log volume is a named volume by default"
    for name in SPARK_WORKERS:
        assert log_volume_mount(services(config)[name]) == shared, name
    # The store and everything the Spark job shares (run dirs; numba cache and scratch beside the log
    # dir) are on that volume.
    env = env_of(worker)
    for log_dir in env["KAFKALOG_LOG_DIRS"].split(","):
        assert Path(log_dir).parent == Path(LOG_VOLUME_PATH), log_dir
    assert Path(env["KAFKALOG_PIPELINE_DIR"]).is_relative_to(LOG_VOLUME_PATH)
    # Elsewhere in Airflow the store is read-only (the dag-processor reads KAFKALOG_CONFIG there).
    for name in AIRFLOW_SERVICES - {"airflow-worker", "airflow-init"}:
        mount = log_volume_mount(services(config)[name])
        assert mount["source"] == shared["source"] and mount["read_only"], name


def test_a_host_path_as_log_volume_is_shared_the_same_way(tmp_path: Path) -> None:
    config = compose_config(tmp_path, KAFKALOG_DATA="/srv/kafka")
    for name in ("airflow-worker", *SPARK_WORKERS):
        mount = log_volume_mount(services(config)[name])
        assert (mount["source"], mount["read_only"]) == ("/srv/kafka", False), name


def test_the_containers_take_no_host_paths_from_the_shell(tmp_path: Path) -> None:
    """``make airflow``'s variables name host paths: the containers' store settings are their own."""
    shell = {"KAFKALOG_CONFIG": "/home/me/server.properties", "KAFKALOG_LOG_DIRS": "/home/me/demo-logs",
             "KAFKALOG_PIPELINE_DIR": "/home/me/.kafkalog-pipeline"}
    env = env_of(services(compose_config(tmp_path, **shell))["airflow-worker"])
    assert (env["KAFKALOG_CONFIG"], env["KAFKALOG_LOG_DIRS"]) == ("", f"{LOG_VOLUME_PATH}/kafka-logs")
    assert env["KAFKALOG_PIPELINE_DIR"].startswith(LOG_VOLUME_PATH)
    config = compose_config(tmp_path, KAFKALOG_COMPOSE_CONFIG=f"{LOG_VOLUME_PATH}/server.properties")
    for name in AIRFLOW_SERVICES:
        assert env_of(services(config)[name])["KAFKALOG_CONFIG"] == f"{LOG_VOLUME_PATH}/server.properties", name


def test_spark_default_points_at_the_master_and_the_driver_is_reachable(config: dict[str, Any]) -> None:
    for name in AIRFLOW_SERVICES:
        conn = json.loads(env_of(services(config)[name])["AIRFLOW_CONN_SPARK_DEFAULT"])
        assert conn == {"conn_type": "spark", "host": "spark://spark-master", "port": 7077}, name
    master = services(config)["spark-master"]
    command = command_of(master)
    assert command[command.index("--host") + 1] == "spark-master" == master.get("hostname")
    assert command[command.index("--port") + 1] == "7077"
    for name in SPARK_WORKERS:
        assert command_of(services(config)[name])[-1] == SPARK_MASTER_URL, name
        assert services(config)[name]["depends_on"]["spark-master"]["condition"] == "service_healthy"
    # The driver runs in the Celery worker (spark-submit, client mode) and binds to this address, which
    # the executors on the Spark workers must reach: the worker's own hostname on the compose network.
    worker = services(config)["airflow-worker"]
    assert env_of(worker)["KAFKALOG_SPARK_DRIVER_HOST"] == worker["hostname"] == "airflow-worker"


def test_the_components_share_the_execution_api_and_the_jwt_secret(config: dict[str, Any]) -> None:
    envs = {name: env_of(services(config)[name]) for name in AIRFLOW_SERVICES}
    urls = {env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] for env in envs.values()}
    assert urls == {"http://airflow-apiserver:8080/execution/"}
    assert command_of(services(config)["airflow-apiserver"])[-2:] == ["--port", "8080"]
    secrets = {(env.get("AIRFLOW__API_AUTH__JWT_SECRET"), env.get("AIRFLOW__API_AUTH__JWT_SECRET_CMD"))
               for env in envs.values()}
    assert len(secrets) == 1 and any(next(iter(secrets))), secrets
    for name, env in envs.items():
        assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"].startswith("/opt/airflow/secrets/"), name
        assert any(m["target"] == "/opt/airflow/secrets" and m["source"] == "airflow-secrets"
                   for m in mounts(services(config)[name])), name


def test_airflow_init_migrates_and_writes_the_password_file_before_the_others_start(config: dict[str, Any]) -> None:
    init = services(config)["airflow-init"]
    script = " ".join(command_of(init))
    assert "airflow db migrate" in script and "passwords.json" in script
    assert str(init.get("restart", "no")) == "no"
    for name in AIRFLOW_SERVICES - {"airflow-init"}:
        assert services(config)[name]["depends_on"]["airflow-init"]["condition"] == \
            "service_completed_successfully", name
    assert services(config)["airflow-worker"]["depends_on"]["spark-master"]["condition"] == "service_healthy"


def test_long_running_services_have_health_checks(config: dict[str, Any]) -> None:
    for name, service in services(config).items():
        if name == "airflow-init":
            continue
        check = service.get("healthcheck") or {}
        assert check.get("test") and not check.get("disable"), f"{name} has no health check"


def test_images_and_builds(config: dict[str, Any]) -> None:
    project = {name: s for name, s in services(config).items() if name.startswith(("airflow-", "spark-"))}
    assert set(project) == AIRFLOW_SERVICES | SPARK_WORKERS | {"spark-master"}
    images = {s["image"] for s in project.values()}
    assert len(images) == 1, f"one project image for Airflow and Spark: {images}"
    for name, service in project.items():
        build = service.get("build") or {}
        assert Path(build["context"]).resolve() == REPO, name
        assert build.get("dockerfile", "Dockerfile") == "Dockerfile", name
    # The Spark daemons are pyspark's own (the driver's Spark version, Python and kafkalog on the same paths).
    for name in SPARK_WORKERS | {"spark-master"}:
        assert command_of(services(config)[name])[0] == "spark-class", name
    tags = {name: services(config)[name]["image"] for name in ("postgres", "redis")}
    for name, image in tags.items():
        assert image.startswith(f"{name}:") and not image.endswith(":latest"), image


# --- the image ---------------------------------------------------------------------------------------------
def _dockerfile_lines() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in DOCKERFILE.read_text().splitlines()
                                         if not line.lstrip().startswith("#")))
    return [line.strip() for line in text.splitlines() if line.strip()]


def _pin(name: str) -> str:
    found = re.search(rf"^{re.escape(name)}==(\S+)$", (REPO / "constraints.txt").read_text(), re.M)
    assert found, f"{name} is not pinned in constraints.txt"
    return found.group(1)


def test_the_dockerfile_installs_jre_17_and_the_pinned_project() -> None:
    lines = _dockerfile_lines()
    text = "\n".join(lines)
    assert re.search(r"^FROM \S*python:3\.11", text, re.M) or re.search(r"PYTHON_IMAGE=python:3\.11", text)
    assert re.search(r"apt-get install .*\bopenjdk-17-jre-headless\b", text)
    assert re.search(r"pip install -c constraints\.txt \"?\.\[pipeline\]", text)
    pyspark = _pin("pyspark")
    assert re.search(r"pip install --no-deps --force-reinstall \"?pyspark==(\$\{PYSPARK_VERSION\}|"
                     + re.escape(pyspark) + ")", text)
    assert re.search(rf"ARG PYSPARK_VERSION={re.escape(pyspark)}\b", text) or f"pyspark=={pyspark}" in text
    # kafkalog goes to site-packages: the job's path is given (kafkalog.cycle.spark.JOB_ENV).
    job = re.search(r"KAFKALOG_SPARK_JOB=(\S+)", text)
    assert job and job.group(1).endswith("/spark_jobs/compact_logs.py")


def test_the_build_context_holds_what_the_dockerfile_copies() -> None:
    allowed = {line.strip().strip("/").lstrip("!") for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.strip().startswith("!")}
    ignore_all = "*" in {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()}
    for line in _dockerfile_lines():
        if line.startswith("COPY "):
            sources = [s for s in line.split()[1:-1] if not s.startswith("--")]
            for source in sources:
                assert (REPO / source).exists(), source
                assert not ignore_all or source.strip("/") in allowed, f"{source} is excluded by .dockerignore"
