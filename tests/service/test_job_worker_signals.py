"""A job worker stops as a stream worker does: SIGTERM and a first Ctrl-C after the job in hand, leaving its group;
also when started in the background of a script, where SIGINT arrives ignored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from streamdp.service.connection import connect
from streamdp.service.job_queue import JOB_GROUP

pytestmark = [pytest.mark.redis]

ROOT = str(Path(__file__).resolve().parents[2])


def _consumers(r, queue: str) -> list[str]:
    try:
        return [c["name"].decode() for c in r.xinfo_consumers(queue, JOB_GROUP)]
    except Exception:  # (the group is not made yet)
        return []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_job_worker_stops_cleanly_and_leaves_its_group(redis_url, sig):
    r = connect(redis_url)
    queue = f"sdp:jobs:t-{uuid.uuid4().hex[:10]}"
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.Popen(
        [sys.executable, "-m", "streamdp", "job", "worker", "--queue", queue, "--block-ms", "100"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # as `cmd &` in a script starts it
    )
    try:
        deadline = time.monotonic() + 60
        while not _consumers(r, queue):  # (polled: the worker's start takes an import's time)
            assert p.poll() is None and time.monotonic() < deadline, "the job worker did not join its group"
            time.sleep(0.05)
        p.send_signal(sig)
        _, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
        assert "job(s) handled" in err and "Traceback" not in err, err
        assert _consumers(r, queue) == []  # it held nothing: it left the group
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        r.delete(queue, f"{queue}:index")


def test_a_second_ctrl_c_aborts_the_job_in_hand(redis_url):
    """The first SIGINT asks for a stop after the job in hand; a second aborts it (its entry stays pending, for
    another job worker); SIGTERM never aborts."""
    from streamdp.service.job_worker import JobWorker

    queue = f"sdp:jobs:t-{uuid.uuid4().hex[:10]}"
    w = JobWorker(redis_url, queue=queue)
    try:
        w.stop(signal.SIGTERM)
        w.stop(signal.SIGTERM)
        assert w.stopping
        w.stop(signal.SIGINT)  # (stopping already: a Ctrl-C now aborts)
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("a Ctrl-C while stopping did not abort")
    finally:
        connect(redis_url).delete(queue)
