"""The Prometheus exporter: public figures over HTTP, never the exact counts, and it survives a failed scrape."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest

fakeredis = pytest.importorskip("fakeredis")
pytest.importorskip("lupa")

from streamdp.service.exporter import CONTENT_TYPE, make_server, metrics_text, parse_address, start  # noqa: E402
from streamdp.service.producer import Producer  # noqa: E402
from streamdp.service.registry import create_model  # noqa: E402
from tests.service.conftest import DS, _drain, _model, _worker  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def served(r):
    server = make_server(r, host="127.0.0.1", port=0)
    start(server)
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def test_metrics_serve_public_figures_of_every_model(r, served):
    _model(r)
    Producer(r, "m").push(DS.X[:100], DS.y[:100])
    _drain(_worker(r, "m"))
    create_model(r, "w", DS.schema, n_trees=2, height=2, epsilon=1.0, seed=1, release="window", release_every=3600)
    status, ctype, text = _get(served + "/metrics")
    assert status == 200 and ctype == CONTENT_TYPE
    assert 'streamdp_version{model="m"} 1' in text and 'streamdp_version{model="w"} 0' in text
    assert 'streamdp_estimated_records{model="m"}' in text
    assert re.search(r'^streamdp_cell_noise_sd\{model="w"\} \d', text, re.M)
    assert re.search(r'^streamdp_window_seconds\{model="w"\} 3600', text, re.M)
    assert re.search(r'^streamdp_lag_bound_seconds\{model="w"\} \d', text, re.M)
    assert "streamdp_exporter_models 2" in text and "streamdp_exporter_up 1" in text
    for exact in ("records_merged", "dead_letters", "acked_without_merge", "poison", "dead_letter_length"):
        assert f"streamdp_{exact}" not in text, exact  # (the exact counters exist in Redis: 100 records merged)
    assert 'streamdp_entries_read_total{model="w"}' not in text  # batch-level figures are exact under windows


def test_other_paths_and_a_failed_scrape_do_not_stop_the_server(r, served):
    assert _get(served + "/")[0] == 200 and "/metrics" in _get(served + "/")[2]
    assert _get(served + "/admin")[0] == 404
    r.hset("sdp:registry", "broken", b"\xff not json")
    status, _, text = _get(served + "/metrics")
    assert status == 503 and "scrape failed" in text and "not json" not in text
    r.hdel("sdp:registry", "broken")
    assert _get(served + "/metrics")[0] == 200


def test_metrics_text_of_named_models_only(r):
    _model(r, "a")
    _model(r, "b")
    text = metrics_text(r, ["a"])
    assert 'model="a"' in text and 'model="b"' not in text


@pytest.mark.parametrize("bad", ["", "x", "host:", ":9108", "70000", "1.2.3.4:-1"])
def test_bad_serve_addresses_are_named(bad):
    with pytest.raises(ValueError, match="--serve"):
        parse_address(bad)


def test_cli_refuses_to_serve_exact_counts(r, monkeypatch, capsys):
    from streamdp.cli import main

    monkeypatch.setattr("streamdp.cli.stats.client", lambda args: r)
    assert main(["stats", "--serve", "0", "--exact"]) == 2
    assert "--exact cannot be served" in capsys.readouterr().err


def test_the_grafana_dashboard_draws_only_metrics_the_exporter_serves(r):
    """Every streamdp_* series a panel queries is one the exporter can serve (a renamed gauge would leave an
    empty panel), and the compose files wire the exporter, Prometheus and Grafana to files that ship."""
    _model(r)
    create_model(r, "w", DS.schema, n_trees=2, height=2, epsilon=1.0, seed=1, release="window", release_every=5)
    from streamdp.service.stats import _HELP, COUNTERS

    served = set(re.findall(r"^# TYPE (streamdp_\w+)", metrics_text(r), re.M))
    # (figures that appear once a model has released, or where the server reports them: named, documented)
    served |= {f"streamdp_{k}_total" if k in COUNTERS else f"streamdp_{k}" for k in _HELP}
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "dashboards" / "streamdp.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert exprs
    for expr in exprs:
        for metric in re.findall(r"streamdp_\w+", expr):
            assert metric in served, (metric, sorted(served))
    scrape = (ROOT / "deploy" / "prometheus.yml").read_text()
    assert "exporter:9108" in scrape
    compose = (ROOT / "deploy" / "compose.yaml").read_text()
    for needed in ("stats", "--serve", "0.0.0.0:9108", "./prometheus.yml", "./grafana/"):
        assert needed in compose, needed
    for rel in re.findall(r"\./(grafana/[\w/.-]+)", compose):
        assert (ROOT / "deploy" / rel).exists(), rel
