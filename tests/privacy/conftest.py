"""The ledger tests' fixtures: a source of the test's own name (its keys removed after), a ledger of each store."""

from __future__ import annotations

import pytest

from streamdp.privacy.ledger import InMemoryLedger
from streamdp.service.connection import connect
from streamdp.service.keys import REGISTRY
from streamdp.service.ledger_store import RedisLedger


def forget(url: str, name: str) -> None:
    """Remove every key of ``name`` (a test's own unique name; never FLUSH)."""
    r = connect(url)
    ks = list(r.scan_iter(match=f"sdp:{{{name}}}:*", count=1000))
    if ks:
        r.delete(*ks)
    r.hdel(REGISTRY, name)


@pytest.fixture
def source(redis_url, unique_name):
    yield unique_name
    forget(redis_url, unique_name)


@pytest.fixture(params=["memory", "redis"])
def led(request, redis_url):
    return InMemoryLedger() if request.param == "memory" else RedisLedger(redis_url)
