"""The Log store page in the Airflow UI: a FastAPI app at ``/kafkalog`` plus a "Log store" entry in the
navigation (Browse menu) that shows it inside Airflow.

The data comes from ``kafkalog.airflow.log_store_view`` (inventory, queries, charts) and
``log_store_detail`` (partition view, what-if); this module is the HTTP surface only.

- **Authentication.** Every route depends on Airflow's ``get_user`` (the UI's ``_token`` cookie or a
  Bearer token): 401 without one. The app has no docs or OpenAPI routes that would bypass it.
- **One store at a time.** ``store`` (every route; default ``kafkalog_default``) names one of
  ``[kafkalog] stores``, a ``kafkalog`` connection; ``/api/stores`` lists them for the page's selector.
- **Read endpoints change nothing**, and no parameter names a path: partitions are found by listing
  the store's log dirs (from its connection, as for the DAGs), topic names are checked against Kafka's
  rules, and a ``log_dir`` filter must equal one of the store's dirs.
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

from kafkalog.airflow import log_store_detail as detail
from kafkalog.airflow import log_store_view as view
from kafkalog.airflow.log_store_inventory import BadRequest, NotFound, dag_run_link
from kafkalog.airflow.provider import DEFAULT_CONN_ID, configured_stores, option
from kafkalog.errors import KafkaLogError

if TYPE_CHECKING:
    from kafkalog.log.store import LogStore  # at run time only where used: it imports numba

PREFIX = "/kafkalog"
COMPACT_DAG = "kafkalog_compact"
PAGE = Path(__file__).with_name("ui_static") / "index.html"
CACHE = view.InventoryCache(
    ttl_s=float(os.environ.get("KAFKALOG_UI_CACHE_TTL_S") or option("ui_cache_ttl_s", "10")),
    max_stale_s=float(os.environ.get("KAFKALOG_UI_MAX_STALE_S") or option("ui_max_stale_s", "300")))


@asynccontextmanager
async def _lifespan(_: FastAPI) -> AsyncIterator[None]:
    # The api-server enters every plugin app's lifespan at start: build the inventory now, so the
    # first visitor does not wait for a status pass over every partition.
    for conn_id in configured_stores():
        try:
            CACHE.refresh_in_background(view.StoreSpec.of(conn_id))
        except Exception:  # noqa: BLE001 - a store that cannot be opened: each request for it says why
            pass
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


def _spec(store: str) -> view.StoreSpec:
    if store not in configured_stores():
        raise NotFound(f"no store {store!r}: the stores are {', '.join(configured_stores())} ([kafkalog] stores)")
    return view.StoreSpec.of(store)


def _store(store: str) -> tuple[view.StoreSpec, LogStore]:
    spec = _spec(store)
    return spec, spec.open()


def _now_ms() -> int:
    return int(time.time() * 1000)


@app.get("/", response_class=HTMLResponse)
def page() -> HTMLResponse:
    return HTMLResponse(PAGE.read_text(encoding="utf-8"), headers={
        "Cache-Control": "no-store", "Content-Security-Policy": "frame-ancestors 'self'"})


@app.get("/api/stores")
def stores() -> dict[str, Any]:
    """The stores of ``[kafkalog] stores``, each with its name or why it cannot be opened."""
    from kafkalog.airflow.hooks import KafkalogHook
    from kafkalog.airflow.provider import cleanup_dag_id

    out = []
    for conn_id in configured_stores():
        try:
            name, error = KafkalogHook(conn_id).store.name, None
        except Exception as exc:  # noqa: BLE001 - shown beside the store in the selector
            name, error = conn_id, str(exc)
        out.append({"conn_id": conn_id, "name": name, "dag_id": cleanup_dag_id(conn_id), "error": error})
    return {"default": DEFAULT_CONN_ID, "stores": out}


@app.get("/api/summary")
def summary(store: str = DEFAULT_CONN_ID, refresh: bool = False) -> dict[str, Any]:
    inventory, freshness = CACHE.get(_spec(store), refresh=refresh)
    return {**view.summary(inventory), **freshness, "store": store}


@app.get("/api/partitions")
def partitions(store: str = DEFAULT_CONN_ID, q: str | None = None, topic: str | None = None,
               policy: str | None = None, blocked: str | None = None,
               quarantined: bool | None = None, log_dir: str | None = None, sort: str = "topic",
               order: str = "asc", offset: int = 0, limit: int = 50) -> dict[str, Any]:
    if order not in ("asc", "desc"):
        raise BadRequest(f"order={order!r}: asc or desc")
    inventory, freshness = CACHE.get(_spec(store))
    return {**view.query_partitions(inventory, q=q, topic=topic, policy=policy, blocked=blocked,
                                    quarantined=quarantined, log_dir=log_dir, sort=sort,
                                    descending=order == "desc", offset=offset, limit=limit), **freshness}


@app.get("/api/partitions/{topic}/{partition}")
def partition(topic: str, partition: int, store: str = DEFAULT_CONN_ID) -> dict[str, Any]:
    _, log_store = _store(store)
    return detail.partition_view(log_store, topic, partition, _now_ms())


class WhatIf(BaseModel):
    store: str = DEFAULT_CONN_ID
    topic: str
    config: dict[str, str | int | float]
    now_ms: int | None = None


def _require_json(request: Request) -> None:
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise HTTPException(415, "send application/json")


@app.post("/api/what-if")
def what_if(body: WhatIf, request: Request) -> dict[str, Any]:
    _require_json(request)
    _, log_store = _store(body.store)
    changes = {k: str(v) for k, v in body.config.items() if str(v).strip() != ""}
    return detail.what_if(log_store, body.topic, changes, _now_ms() if body.now_ms is None else body.now_ms)


def _compact_conf(store_id: str, topic: str, partition: int) -> dict[str, Any]:
    """The run's conf, after checking the partition exists, its topic is compacted and the broker config
    runs a log cleaner (the run would be refused otherwise)."""
    from kafkalog.policy.log_cleaner import require_cleaner

    _, store = _store(store_id)
    detail.locate(store, topic, partition)
    if not store.log_config(topic).compact:
        raise HTTPException(409, f"topic {topic!r} is not compacted (cleanup.policy="
                                 f"{','.join(sorted(store.log_config(topic).cleanup_policy))})")
    try:
        require_cleaner(store.broker)
    except KafkaLogError as exc:
        raise HTTPException(409, str(exc)) from None
    return {"store": store_id, "topic": topic, "partitions": [partition]}


def _airflow_url() -> str:
    from airflow.configuration import conf

    url = os.environ.get("KAFKALOG_UI_AIRFLOW_URL") or conf.get("api", "base_url", fallback=None)
    if not url:
        host = conf.get("api", "host", fallback="127.0.0.1")
        url = f"http://{'127.0.0.1' if host in ('', '0.0.0.0') else host}:{conf.get('api', 'port', fallback='8080')}"
    return url.rstrip("/")


@app.post("/api/partitions/{topic}/{partition}/compact")
async def compact_now(topic: str, partition: int, request: Request, store: str = DEFAULT_CONN_ID) -> JSONResponse:
    """Trigger ``kafkalog_compact`` for this partition of ``store``, as the caller, through Airflow's REST API."""
    _require_json(request)
    conf = await run_in_threadpool(_compact_conf, store, topic, partition)
    auth = request.headers.get("authorization", "")
    token = auth[7:] if auth.lower().startswith("bearer ") else request.cookies.get("_token", "")
    body = {"logical_date": None, "conf": conf,
            "note": f"compact now: {topic}-{partition} of store {store} (Log store page)"}
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
