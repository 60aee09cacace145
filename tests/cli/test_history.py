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
    # the time shown is the window's scheduled end, labelled so (it read "released", before any release)
    assert "window end (UTC)" in out and "released (UTC)" not in out
    assert main(u + ["model", "history", unique_name, "--json", "--last", "3"]) == 0  # (it gave every window)
    assert json.loads(capsys.readouterr().out) == lines[-3:]
    assert all(e["release_sd"] > 0 for e in lines)  # the release's own draw, beside the published counts' sd
    with pytest.raises(SystemExit):
        main(["model", "history", "-h"])
    assert "negative total, which is noise" in capsys.readouterr().out
    pytest.importorskip("matplotlib")
    png = tmp_path / "h.png"
    assert main(u + ["model", "history", unique_name, "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


@pytest.mark.parametrize("n", [300, 5])
def test_a_grown_models_history_shows_the_sd_its_releases_drew(redis_url, unique_name, capsys, n):
    """release sd/cell printed "-" on every row of a grow model: it shows the sd each grown release drew per node.
    The first release's is what it drew, read from the published version's leaves: its probe leaves the trees
    less of the budget, but a probe that splits nothing (5 records) is not spent, and the history said it was."""
    import numpy as np

    from streamdp.service.consumer import Consumer
    from streamdp.service.registry import show_model

    u = ["--redis-url", redis_url]
    create = ["model", "create", unique_name, "--schema", SCHEMA, "--trees", "2", "--height", "3", "--epsilon", "1"]
    assert main(u + create + ["--release", "grow", "--release-every", "10", "--cadence", "fixed"]) == 0
    w = Worker(redis_url, unique_name, block_ms=1)
    with Producer(redis_url, unique_name) as p:
        p.push(DS.X[:n], DS.y[:n])
    while w.step(block_ms=1) or not w.reader.drained():
        pass
    for _ in range(2):  # the first release (n records), then an idle one
        assert w.closer.tick(w.closer.windows.read().end + 0.001) == 1
    info = show_model(redis_url, unique_name)
    with Consumer(redis_url, unique_name) as c:
        v1 = c.get(1)  # the published first release: its leaves' noise variance is this release's draw alone
    first = float(np.sqrt(np.max(v1.noise_variance[: v1.n_trees])))
    # (300 records: the probe splits; 5 records: almost always nothing, but its noise may split a tree)
    probed = bool(np.any(v1.structure.n_leaves[: v1.n_trees] > 1))
    assert probed or n == 5
    capsys.readouterr()
    assert main(u + ["model", "history", unique_name, "--json"]) == 0
    lines = json.loads(capsys.readouterr().out)
    assert [e["merged"] for e in lines] == [True, True]
    assert info["first_cell_sd"] > info["cell_sd"] > 0
    assert first == pytest.approx(info["first_cell_sd"] if probed else info["cell_sd"], abs=1e-4)
    assert [e["release_sd"] for e in lines] == pytest.approx([first, info["cell_sd"]], abs=1e-4)
    assert main(u + ["model", "history", unique_name]) == 0
    rows = capsys.readouterr().out.splitlines()[1:3]
    assert [r.split()[-2] for r in rows] == [f"{e['release_sd']:,.1f}" for e in lines]


def test_history_plot_without_matplotlib_says_which_extra_to_install(redis_url, unique_name, tmp_path, monkeypatch):
    create = ["model", "create", unique_name, "--schema", SCHEMA, "--trees", "2", "--height", "2", "--epsilon", "1"]
    assert main(["--redis-url", redis_url] + create) == 0
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an import of it fails
    with pytest.raises(SystemExit, match=r"needs matplotlib: pip install 'streamdp\[plot\]'"):
        main(["--redis-url", redis_url, "model", "history", unique_name, "--plot", str(tmp_path / "h.png")])
    assert not (tmp_path / "h.png").exists()


def test_history_marks_a_noisy_count_the_release_floored_at_zero(redis_url, unique_name, capsys):
    """A trial's finding: a window whose noisy total came out below 0 is released as 0, and the table printed
    "0", which reads as an exact count of none. Such a count now prints as "<= 0" with a legend under the table;
    the stored history stays as it was. A grown model's counts are not floored: its 0.0 is no floor."""
    import redis as redis_py

    from streamdp.service.history import append, entry
    from streamdp.service.keys import Keys
    from tests.conftest import purge_name

    u = ["--redis-url", redis_url]
    r = redis_py.Redis.from_url(redis_url)
    for name, release in ((unique_name, "window"), (f"{unique_name}g", "grow")):
        create = ["model", "create", name, "--schema", SCHEMA, "--trees", "2", "--height", "2", "--epsilon", "1"]
        assert main(u + create + ["--release", release, "--release-every", "10"]) == 0
        p = r.pipeline()
        for w, n in enumerate((250.0, 0.0, 0.4), start=1):  # (as a closer writes them: released values)
            append(p, Keys(name), entry(w, w, n > 1, 1.7e9 + 10 * w, 10.0, n, 2.0, 1.0))
        p.execute()
    try:
        stored = r.lrange(Keys(unique_name).pub_history, 0, -1)
        capsys.readouterr()
        assert main(u + ["model", "history", unique_name]) == 0
        table = capsys.readouterr().out.splitlines()
        counts = [ln.split()[6] for ln in table[1:4]]  # (the columns after the date and time)
        assert counts == ["250", "<=", "0.4"] and " <= 0 " in table[2]
        assert table[-1].startswith("<= 0: the window's noisy record total came out at or below 0")
        assert table[-1].endswith("(noise, not a count of none)")
        assert r.lrange(Keys(unique_name).pub_history, 0, -1) == stored  # nothing stored changed
        assert main(u + ["model", "history", unique_name, "--json"]) == 0
        assert [e["noisy_records"] for e in json.loads(capsys.readouterr().out)] == [250.0, 0.0, 0.4]
        assert main(u + ["model", "history", f"{unique_name}g"]) == 0  # grow: released unfloored
        out = capsys.readouterr().out
        assert "<= 0" not in out and [ln.split()[6] for ln in out.splitlines()[1:4]] == ["250", "0.0", "0.4"]
    finally:
        purge_name(r, f"{unique_name}g")  # (its ledger too)


def test_history_plot_draws_each_window_length_over_its_own_span(tmp_path, monkeypatch):
    """The window-length panel drew each window's length from its end onward, over the next window: a 16 s window
    showed as the next window's 1 s spike. Each length now covers its window, from end - length to end."""
    pytest.importorskip("matplotlib")
    from matplotlib.axes import Axes
    from matplotlib.lines import Line2D

    from streamdp.cli.history import plot_history

    lines = [
        {"window": w, "version": 1, "merged": True, "time": end, "length_s": length, "noisy_records": 5.0,
         "cell_sd": 1.0}
        for w, (end, length) in enumerate([(104.0, 4.0), (120.0, 16.0), (121.0, 1.0)], start=1)
    ]  # fmt: skip
    drawn = []
    plot = Axes.plot

    def spy(self, *args, **kwargs):
        out = plot(self, *args, **kwargs)
        if self.get_ylabel() == "" and kwargs.get("color") == "tab:green":
            drawn.extend(out)
        return out

    monkeypatch.setattr(Axes, "plot", spy)
    plot_history(lines, str(tmp_path / "h.png"), "m", kind="window")
    (line,) = [x for x in drawn if isinstance(x, Line2D)]
    xs, ys = line.get_drawstyle(), list(zip(line.get_xdata(), line.get_ydata()))
    assert xs == "steps-pre" and ys == [(-4.0, 4.0), (0.0, 4.0), (16.0, 16.0), (17.0, 1.0)]
    # steps-pre: the value at x holds over (previous x, x]: the 16 s window over (0, 16], the last 1 s over (16, 17]
