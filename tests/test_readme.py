"""The README runs as written: its Python examples, its service sequence, and a Performance table that is the
results' (generated, never typed)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", README, re.M | re.S)


def test_readme_is_short():
    assert len(README.splitlines()) <= 200


def test_performance_table_is_generated_from_the_results():
    """Numbers in the README come from benchmarks/results (python -m benchmarks report --readme)."""
    from benchmarks import headlines

    block = README.split(headlines.START, 1)[1].split(headlines.END, 1)[0]
    assert block.strip() == headlines.table().strip(), "rerun: python -m benchmarks report --readme"


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(_blocks("python"))))
def test_python_examples_run_as_written(index, tmp_path):
    code = _blocks("python")[index]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore::DeprecationWarning"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "accuracy" in done.stdout.lower(), done.stdout


@pytest.mark.long
@pytest.mark.redis
def test_service_sequence_runs_as_written_and_publishes_within_the_lag_bound(tmp_path):
    """The six commands on a Redis of their own (the model is named as in the README), the worker left running
    in the background as written, from an empty directory; the pushed records are published within the lag bound the sequence sets."""
    from streamdp.records.datasets import load
    from streamdp.service.consumer import Consumer
    from streamdp.service.embedded import EmbeddedRedis

    (block,) = [b for b in _blocks("bash") if "streamdp model create" in b]
    lag = float(re.search(r"--max-lag (\S+)", block).group(1))
    try:
        server = EmbeddedRedis.start()
    except (RuntimeError, OSError) as e:
        pytest.skip(f"cannot start a Redis of the test's own: {e}")
    # run from a directory of its own, no clone around it: the commands name bundled files by name, as an
    # installed package has them (the package is imported from PYTHONPATH)
    env = {**os.environ, "REDIS_URL": server.url, "PYTHONPATH": str(ROOT)}
    env.pop("STREAMDP_NOISE_KEY_FILE", None)
    log = tmp_path / "out.log"
    with log.open("w") as sink:  # (a file: the background worker keeps a pipe open after bash exits)
        shell = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=tmp_path,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the background worker is in this session: killed with it below
        )
    try:
        shell.wait(timeout=120)
        out = log.read_text()
        assert shell.returncode == 0, out
        pushed = time.monotonic()
        assert (tmp_path / "votes.sdp").is_file(), out
        ds = load("congressional-voting")

        def holds_the_push(f) -> bool:  # (a merged release of empty windows, noise alone, can come first)
            return f.n_releases >= 1 and f.estimated_records() >= len(ds.y) / 2

        with Consumer(server.url, "votes") as c:
            forest = c.latest()
            while not holds_the_push(forest) and time.monotonic() - pushed < lag + 10:
                c.wait_newer(forest.version, timeout=2.0)
                forest = c.latest()
        assert holds_the_push(forest), f"the push not published {lag + 10:g} s after it\n{out}"
        majority = max((ds.y == v).mean() for v in set(ds.y))
        assert forest.score(ds.X, ds.y) > majority
    finally:
        try:
            os.killpg(shell.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        shell.wait(timeout=30)
        server.stop()


def test_relative_links_name_files_that_exist():
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), target
