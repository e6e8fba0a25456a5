"""The services the production topology's tests share: a fresh Postgres database (the metadata DB and
Celery's result backend) and an empty Redis DB with a queue of the test's own (Celery's broker), both the
machine's servers on 127.0.0.1; skipped with the reason where they are not running, failed under CI."""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import pytest

HOST = "127.0.0.1"
CLAIM_KEY = "kafkalog-test-claim"  # in the Redis DB a test took for its broker


def _unreachable(what: str, exc: Exception) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} on {HOST} is not reachable ({exc}); CI must run this test")
    pytest.skip(f"{what} on {HOST} is not reachable ({exc})")


@contextmanager
def fresh_postgres_db() -> Iterator[str]:
    """A fresh database's SQLAlchemy URL; dropped after (its connections ended first)."""
    import psycopg2

    try:
        admin = psycopg2.connect(host=HOST, port=5432, user="postgres", dbname="postgres", connect_timeout=5)
    except Exception as exc:  # noqa: BLE001 - no server: skipped with the reason (a failure in CI)
        _unreachable("Postgres (port 5432)", exc)
    admin.autocommit = True
    name = f"kafkalog_test_{uuid.uuid4().hex[:12]}"
    admin.cursor().execute(f"CREATE DATABASE {name}")
    try:
        yield f"postgresql+psycopg2://postgres@{HOST}:5432/{name}"
    finally:
        cursor = admin.cursor()
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
        cursor.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.close()


@pytest.fixture
def postgres_db() -> Iterator[str]:
    """A fresh database's SQLAlchemy URL for the test; dropped after."""
    with fresh_postgres_db() as url:
        yield url


@pytest.fixture
def redis_broker() -> Iterator[tuple[str, str]]:
    """(broker URL on an empty Redis DB, a queue name of this test's own). Afterwards the keys and binding
    entries naming the queue (the worker's node name contains it) are deleted there, then the binding
    deadlines of tables that no longer exist; nothing else."""
    import redis

    def connect(db: int = 0) -> redis.Redis:
        return redis.Redis(host=HOST, port=6379, db=db, socket_connect_timeout=5, decode_responses=True)

    try:
        databases = int(connect().config_get("databases").get("databases") or 16)
    except Exception as exc:  # noqa: BLE001 - as above
        _unreachable("Redis (port 6379)", exc)
    queue = f"kafkalog-test-{uuid.uuid4().hex[:12]}"
    empty = [n for n in range(1, databases) if connect(n).dbsize() == 0]
    random.shuffle(empty)
    # Claimed by a key set only where none is: tests running at once (xdist) each get a DB of their own.
    db = next((n for n in empty if connect(n).set(CLAIM_KEY, queue, nx=True)), None)
    if db is None:
        pytest.skip(f"no empty Redis DB among 1..{databases - 1} for the broker")
    try:
        yield f"redis://{HOST}:6379/{db}", queue
    finally:
        client = connect(db)
        client.delete(CLAIM_KEY)
        for key in map(str, client.scan_iter(match="*")):
            if queue in key:
                client.delete(key)
            elif key.startswith("_kombu.binding.") and client.type(key) == "set":
                mine = [m for m in map(str, client.smembers(key)) if queue in m]
                if mine:
                    client.srem(key, *mine)
        deadlines = "_kombu.binding_deadlines"  # kombu 5.7: exchange tables (pidbox) with a sweep deadline
        for table in map(str, client.zrange(deadlines, 0, -1)):
            if not client.exists(f"_kombu.binding.{table}", f"_kombu.binding_permanent.{table}"):
                client.zrem(deadlines, table)
