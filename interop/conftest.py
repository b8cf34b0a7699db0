"""pytest configuration for the queen-rs interop suite.

Run everything:        .venv/bin/pytest interop
Broker core only:      .venv/bin/pytest interop/test_queues.py interop/test_transactions.py
                       (or: -m "core or tx")
KV only:               .venv/bin/pytest interop/test_kv.py interop/test_tx_kv.py
                       (or: -m "kv or tx_kv")
Operator surface:      .venv/bin/pytest interop/test_admin.py   (or: -m admin)

The broker is QUEEN_URL (default http://127.0.0.1:6632). Every test uses its
own uuid-suffixed queue names and KV namespaces, so the suite can run in any
order against one long-lived broker and database.
"""

import os
import socket
import sys
from urllib.parse import urlsplit

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from qhelpers import QUEEN_URL  # noqa: E402


def pytest_configure(config):
    for name, doc in (
        ("core", "broker core: configure, push, pop, ack, leases, groups, DLQ"),
        ("tx", "transactions: push + ack bundles"),
        ("kv", "standalone KV (client.kv)"),
        ("tx_kv", "KV riders inside transactions"),
        ("admin", "operator surface: resources, messages, DLQ, groups, status, maintenance"),
        ("locks", "locks and semaphores (client.locks, client.lock, the guard)"),
        ("reads", "reads by offset (fetch, partitions/changed)"),
        ("timers", "timers (client.timers, the transaction rider)"),
        ("options", "queue options: order, retryDelay, ttl, encryption, namespace/task pops"),
        ("streams", "streams (queen.Stream runner over /streams/v1)"),
        ("ephemeral", "ephemeral queues (client.ephemeral)"),
    ):
        config.addinivalue_line("markers", f"{name}: {doc}")


@pytest.fixture(scope="session", autouse=True)
def _broker_reachable():
    """Fail fast (one clear message) when nothing listens on QUEEN_URL."""
    parts = urlsplit(QUEEN_URL)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as error:
        pytest.exit(f"queen broker not reachable at {QUEEN_URL}: {error}", returncode=3)
    yield
