"""``streamdp model history``: the public release history as a table, JSON and a PNG (real Redis)."""

from __future__ import annotations

import json
import sys
from importlib import resources

import pytest

from streamdp.cli import main
from streamdp.records.datasets import load
from streamdp.service.producer import Producer
from streamdp.service.registry import load_policy
from streamdp.service.stream_worker import Worker

pytestmark = pytest.mark.redis
DS = load("congressional-voting")
SCHEMA = str(resources.files("streamdp").joinpath("data", "schemas", "congressional-voting.json"))


def test_history_prints_plots_and_dumps_the_released_windows(redis_url, unique_name, tmp_path, capsys):
    u = ["--redis-url", redis_url]
    create = ["model", "create", unique_name, "--schema", SCHEMA, "--trees", "2", "--height", "2", "--epsilon", "1"]
    assert main(u + create + ["--release", "window", "--release-every", "10", "--half-life", "2"]) == 0
    assert main(u + ["model", "history", unique_name]) == 0
    assert "no release history (no window released yet)" in capsys.readouterr().out
    w = Worker(redis_url, unique_name, block_ms=1)
    start = load_policy(redis_url, unique_name)[1]
    with Producer(redis_url, unique_name) as p:
        p.push(DS.X[:200], DS.y[:200])
    while w.step(block_ms=1) or not w.reader.drained():
        pass
    sched = w.closer.windows.read()
    assert w.closer.tick(sched.end + 0.001) == 1
    for _ in range(3):  # idle windows: noise only
        assert w.closer.tick(w.closer.windows.read().end + 0.001) == 1
    assert start < w.closer.windows.read().end
    capsys.readouterr()
    assert main(u + ["model", "history", unique_name, "--json"]) == 0
    lines = json.loads(capsys.readouterr().out)
    assert [e["window"] for e in lines] == [1, 2, 3, 4] and lines[0]["merged"] and lines[0]["version"] == 1
    assert lines[0]["noisy_records"] > 100 and lines[0]["length_s"] == 10.0
    assert all(e["cell_sd"] > 0 for e in lines) and max(e["length_s"] for e in lines) > 10.0  # idle: longer
    assert main(u + ["model", "history", unique_name, "--last", "2"]) == 0
    out = capsys.readouterr().out
    assert "release sd/cell  published sd/cell" in out and "(2 earlier windows not shown" in out
    assert all(e["release_sd"] > 0 for e in lines)  # the release's own draw, beside the published counts' sd
    with pytest.raises(SystemExit):
        main(["model", "history", "-h"])
    assert "negative total, which is noise" in capsys.readouterr().out
    pytest.importorskip("matplotlib")
    png = tmp_path / "h.png"
    assert main(u + ["model", "history", unique_name, "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_history_plot_without_matplotlib_says_which_extra_to_install(redis_url, unique_name, tmp_path, monkeypatch):
    create = ["model", "create", unique_name, "--schema", SCHEMA, "--trees", "2", "--height", "2", "--epsilon", "1"]
    assert main(["--redis-url", redis_url] + create) == 0
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an import of it fails
    with pytest.raises(SystemExit, match=r"needs matplotlib: pip install 'streamdp\[plot\]'"):
        main(["--redis-url", redis_url, "model", "history", unique_name, "--plot", str(tmp_path / "h.png")])
    assert not (tmp_path / "h.png").exists()
