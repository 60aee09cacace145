"""A Prometheus exporter: the public figures of every model (or of some) over HTTP, at ``/metrics``.

``streamdp stats --serve [HOST:]PORT`` runs it; Prometheus scrapes it (``deploy/prometheus.yml``) and
the Grafana dashboard in ``deploy/grafana/`` draws it. Only :func:`streamdp.service.stats.public` figures
leave: exact record-dependent counters are never served over HTTP, whatever the caller asks, because a
scrape endpoint is read by whoever can reach it. Every scrape reads Redis afresh (no cache to go stale).

>>> import fakeredis, urllib.request
>>> server = make_server(fakeredis.FakeRedis(), host="127.0.0.1", port=0)
>>> thread = start(server)
>>> url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
>>> urllib.request.urlopen(url, timeout=5).status
200
>>> server.shutdown(); server.server_close()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from streamdp.service.stats import collect, prometheus_text

__all__ = ["make_server", "start", "metrics_text", "cadence_gauges", "parse_address", "CONTENT_TYPE"]

log = logging.getLogger("streamdp.exporter")

#: Prometheus' text exposition format, version 0.0.4.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def parse_address(text: str) -> tuple[str, int]:
    """``"PORT"`` or ``"HOST:PORT"`` as ``(host, port)``; the host defaults to ``127.0.0.1`` (local only).

    >>> parse_address("9108"), parse_address("0.0.0.0:9108")
    (('127.0.0.1', 9108), ('0.0.0.0', 9108))

    Raises:
        ValueError: not a port in 0..65535, or an empty host.
    """
    host, sep, port = text.rpartition(":")
    if not sep:
        host = "127.0.0.1"
    elif not host:
        raise ValueError(f"--serve {text!r}: the host before ':' is empty (HOST:PORT, or PORT alone)")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--serve {text!r}: the port must be a number in 0..65535 (HOST:PORT, or PORT alone)")
    return host, int(port)


def cadence_gauges(info: dict) -> dict[str, float]:
    """The public cadence and noise figures of one model's :func:`~streamdp.service.registry.show_model` (what
    ``streamdp model show`` prints): window length, lag bound, noisy records of the last release, releases
    merged, one release's noise sd per cell and the noise sd on each class's total now.

    >>> cadence_gauges({"releases": 3, "cell_sd": 1.5, "schedule": {"length": 0.5, "last": 12.0},
    ...                 "cadence": {"max_lag": 300}})["window_seconds"]
    0.5
    """
    out: dict[str, float] = {"releases_merged": float(info.get("releases", 0))}
    if info.get("cell_sd") is not None:
        out["cell_noise_sd"] = float(info["cell_sd"])
    if info.get("class_total_sd") is not None:
        out["class_total_noise_sd"] = float(info["class_total_sd"])
    sched, cadence = info.get("schedule"), info.get("cadence")
    if sched:
        out["window_seconds"] = float(sched["length"])
        if sched.get("last") is not None:
            out["noisy_records_last_release"] = float(sched["last"])
    if cadence:
        out["lag_bound_seconds"] = float(cadence["max_lag"])
    return out


def metrics_text(r: Any, models: Sequence[str] | None = None) -> str:
    """The exposition text of ``models`` (default: every registered model), public figures only (the
    workers' :func:`~streamdp.service.stats.public` counters and :func:`cadence_gauges`), plus
    ``streamdp_exporter_models`` (how many models were read) and ``streamdp_exporter_up`` (1)."""
    from streamdp.service.registry import list_models, show_model

    names = list(models) if models else list(list_models(r))
    figures = {n: {**collect(r, n), **cadence_gauges(show_model(r, n))} for n in names}
    text = prometheus_text(figures, exact=False)
    return text + (
        "# HELP streamdp_exporter_models models read by this scrape\n"
        "# TYPE streamdp_exporter_models gauge\n"
        f"streamdp_exporter_models {len(names)}\n"
        "# HELP streamdp_exporter_up 1 when the exporter read Redis for this scrape\n"
        "# TYPE streamdp_exporter_up gauge\n"
        "streamdp_exporter_up 1\n"
    )


def make_server(r: Any, models: Sequence[str] | None = None, *, host: str = "127.0.0.1", port: int = 9108):
    """An HTTP server answering ``GET /metrics`` with :func:`metrics_text` (``/`` says where to look; any other
    path is 404). A scrape that cannot read Redis answers 503 with the error's class name, and the server
    keeps serving. ``port=0`` picks a free port (``server.server_address``)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the http.server hook's name)
            if self.path.split("?")[0] == "/":
                self._send(200, "streamdp exporter: scrape /metrics\n", "text/plain; charset=utf-8")
                return
            if self.path.split("?")[0] != "/metrics":
                self._send(404, "not found: scrape /metrics\n", "text/plain; charset=utf-8")
                return
            try:
                body = metrics_text(r, models)
            except Exception as exc:  # a service never dies on a failed scrape: Redis down, a model deleted
                log.warning("exporter.scrape_failed %s", type(exc).__name__)
                self._send(503, f"scrape failed: {type(exc).__name__}\n", "text/plain; charset=utf-8")
                return
            self._send(200, body, CONTENT_TYPE)

        def _send(self, status: int, body: str, content_type: str) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the http.server hook's signature)
            log.debug("exporter.request " + format, *args)

    return ThreadingHTTPServer((host, port), Handler)


def start(server: ThreadingHTTPServer) -> threading.Thread:
    """Serve ``server`` on a daemon thread (tests, embedding); ``server.shutdown()`` stops it."""
    thread = threading.Thread(target=server.serve_forever, name="streamdp-exporter", daemon=True)
    thread.start()
    return thread
