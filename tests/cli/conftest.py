"""The CLI's job fixtures: the service's (a model with its records in its stream, a job queue of its own), and a
fakeredis server behind ``streamdp job`` with :func:`run_cli` to call the command line and read what it printed."""

import pytest

from streamdp.cli import job as job_cli
from tests.service.conftest import _cli, model, queue  # noqa: F401


@pytest.fixture
def r(monkeypatch):
    """A fakeredis client that ``streamdp job`` uses instead of a server."""
    fakeredis = pytest.importorskip("fakeredis")
    client = fakeredis.FakeRedis(server=fakeredis.FakeServer(), version=(7, 0))
    monkeypatch.setattr(job_cli, "client", lambda args: client)
    return client


def run_cli(*argv: str) -> tuple[int, str]:
    """``streamdp ARGV`` (its Redis is :func:`r`'s): the exit code and what it printed on stdout."""
    return _cli("redis://unused:1", *argv)
