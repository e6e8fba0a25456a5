"""The Log store page in the Airflow UI: a FastAPI app at ``/kafkalog`` plus a "Log store" entry in the
navigation (Browse menu) that shows it inside Airflow.

The data comes from ``kafkalog.pipeline.log_store_view`` (inventory, queries, charts) and
``log_store_detail`` (partition view, what-if); this module is the HTTP surface only.

- **Authentication.** Every route depends on Airflow's ``get_user`` (the UI's ``_token`` cookie or a
  Bearer token): 401 without one. The app has no docs or OpenAPI routes that would bypass it.
- **Read endpoints change nothing**, and no parameter names a path: partitions are found by listing
  the configured log dirs (``KAFKALOG_LOG_DIRS``/``KAFKALOG_CONFIG``, as for the DAGs), topic names are
  checked against Kafka's rules, and a ``log_dir`` filter must equal a configured dir.
- **Actions go through Airflow.** "Compact now" triggers a ``kafkalog_compact`` run through Airflow's
  REST API with the caller's own token, so Airflow's permissions and audit log apply (a viewer gets
  Airflow's 403). POSTs must be JSON, which a cross-site form cannot send.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from airflow.api_fastapi.core_api.security import get_user
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel

from kafkalog.errors import KafkaLogError
from kafkalog.pipeline import log_store_detail as detail
from kafkalog.pipeline import log_store_view as view
from kafkalog.pipeline.log_store_inventory import BadRequest, NotFound, dag_run_link

if TYPE_CHECKING:
    from kafkalog.log.store import LogStore  # at run time only where used: it imports numba

PREFIX = "/kafkalog"
COMPACT_DAG = "kafkalog_compact"
PAGE = Path(__file__).with_name("kafkalog_ui_static") / "index.html"
CACHE = view.InventoryCache(ttl_s=float(os.environ.get("KAFKALOG_UI_CACHE_TTL_S", "10")),
                            max_stale_s=float(os.environ.get("KAFKALOG_UI_MAX_STALE_S", "300")))


@asynccontextmanager
async def _lifespan(_: FastAPI) -> AsyncIterator[None]:
    # The api-server enters every plugin app's lifespan at start: build the inventory now, so the
    # first visitor does not wait for a status pass over every partition.
    try:
        CACHE.refresh_in_background(view.StoreSpec.from_env())
    except KafkaLogError:
        pass  # no log dirs configured: every request says so
    yield


app = FastAPI(title="kafkalog Log store", dependencies=[Depends(get_user)], docs_url=None, redoc_url=None,
              openapi_url=None, lifespan=_lifespan)


@app.exception_handler(KafkaLogError)
async def _refused(_: Request, exc: KafkaLogError) -> JSONResponse:
    code = 400 if isinstance(exc, BadRequest) else 404 if isinstance(exc, NotFound) else 503
    return JSONResponse({"detail": str(exc)}, status_code=code)


@app.exception_handler(OSError)
async def _unreadable(_: Request, exc: OSError) -> JSONResponse:
    return JSONResponse({"detail": f"the log dirs cannot be read: {exc}"}, status_code=503)


def _store() -> tuple[view.StoreSpec, LogStore]:
    spec = view.StoreSpec.from_env()
    return spec, spec.open()


def _now_ms() -> int:
    return int(time.time() * 1000)


@app.get("/", response_class=HTMLResponse)
def page() -> HTMLResponse:
    return HTMLResponse(PAGE.read_text(encoding="utf-8"), headers={
        "Cache-Control": "no-store", "Content-Security-Policy": "frame-ancestors 'self'"})


@app.get("/api/summary")
def summary(refresh: bool = False) -> dict[str, Any]:
    inventory, freshness = CACHE.get(view.StoreSpec.from_env(), refresh=refresh)
    return {**view.summary(inventory), **freshness}


@app.get("/api/partitions")
def partitions(q: str | None = None, topic: str | None = None, policy: str | None = None, blocked: str | None = None,
               quarantined: bool | None = None, log_dir: str | None = None, sort: str = "topic",
               order: str = "asc", offset: int = 0, limit: int = 50) -> dict[str, Any]:
    if order not in ("asc", "desc"):
        raise BadRequest(f"order={order!r}: asc or desc")
    inventory, freshness = CACHE.get(view.StoreSpec.from_env())
    return {**view.query_partitions(inventory, q=q, topic=topic, policy=policy, blocked=blocked,
                                    quarantined=quarantined, log_dir=log_dir, sort=sort,
                                    descending=order == "desc", offset=offset, limit=limit), **freshness}


@app.get("/api/partitions/{topic}/{partition}")
def partition(topic: str, partition: int) -> dict[str, Any]:
    _, store = _store()
    return detail.partition_view(store, topic, partition, _now_ms())


class WhatIf(BaseModel):
    topic: str
    config: dict[str, str | int | float]
    now_ms: int | None = None


def _require_json(request: Request) -> None:
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise HTTPException(415, "send application/json")


@app.post("/api/what-if")
def what_if(body: WhatIf, request: Request) -> dict[str, Any]:
    _require_json(request)
    _, store = _store()
    changes = {k: str(v) for k, v in body.config.items() if str(v).strip() != ""}
    return detail.what_if(store, body.topic, changes, _now_ms() if body.now_ms is None else body.now_ms)


def _compact_conf(topic: str, partition: int) -> dict[str, Any]:
    """The run's conf, after checking the partition exists, its topic is compacted and the broker config
    runs a log cleaner (the run would be refused otherwise)."""
    from kafkalog.policy.log_cleaner import require_cleaner

    spec, store = _store()
    detail.locate(store, topic, partition)
    if not store.log_config(topic).compact:
        raise HTTPException(409, f"topic {topic!r} is not compacted (cleanup.policy="
                                 f"{','.join(sorted(store.log_config(topic).cleanup_policy))})")
    try:
        require_cleaner(store.broker)
    except KafkaLogError as exc:
        raise HTTPException(409, str(exc)) from None
    return {"log_dirs": list(spec.log_dirs), "config_file": spec.config_file, "topic": topic,
            "partitions": [partition]}


def _airflow_url() -> str:
    from airflow.configuration import conf

    url = os.environ.get("KAFKALOG_UI_AIRFLOW_URL") or conf.get("api", "base_url", fallback=None)
    if not url:
        host = conf.get("api", "host", fallback="127.0.0.1")
        url = f"http://{'127.0.0.1' if host in ('', '0.0.0.0') else host}:{conf.get('api', 'port', fallback='8080')}"
    return url.rstrip("/")


@app.post("/api/partitions/{topic}/{partition}/compact")
async def compact_now(topic: str, partition: int, request: Request) -> JSONResponse:
    """Trigger ``kafkalog_compact`` for this partition, as the caller, through Airflow's REST API."""
    _require_json(request)
    conf = await run_in_threadpool(_compact_conf, topic, partition)
    auth = request.headers.get("authorization", "")
    token = auth[7:] if auth.lower().startswith("bearer ") else request.cookies.get("_token", "")
    body = {"logical_date": None, "conf": conf, "note": f"compact now: {topic}-{partition} (Log store page)"}
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(f"{_airflow_url()}/api/v2/dags/{COMPACT_DAG}/dagRuns", json=body,
                                     headers={"Authorization": f"Bearer {token}"})
    try:
        answer = response.json()
    except ValueError:
        answer = {"detail": response.text[:500]}
    if response.status_code not in (200, 201):
        return JSONResponse({"detail": f"Airflow refused to trigger {COMPACT_DAG}: {answer.get('detail', answer)}"},
                            status_code=response.status_code)
    run_id = answer["dag_run_id"]
    return JSONResponse({"dag_id": COMPACT_DAG, "dag_run_id": run_id, "state": answer.get("state"),
                         "conf": conf, "dag_run": dag_run_link(f"{COMPACT_DAG}/{run_id}")}, status_code=200)


class KafkalogUiPlugin(AirflowPlugin):
    name = "kafkalog_ui"
    fastapi_apps = [{"app": app, "url_prefix": PREFIX, "name": "kafkalog Log store"}]
    external_views = [{"name": "Log store", "href": f"{PREFIX}/", "destination": "nav", "category": "browse",
                       "url_route": "log-store"}]
