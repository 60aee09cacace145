"""A river classifier backed by the live streamdp service (its published model and its record stream)."""

from __future__ import annotations

import math
import time
import uuid
from typing import Any

import numpy as np
import river.base  # absolute import: this package is streamdp.river, the library is river

from streamdp.river.forest_view import ForestView
from streamdp.validation import check_choice, check_integer, check_number

__all__ = ["ServiceClassifier"]


class ServiceClassifier(river.base.Classifier):
    """A river classifier backed by the live streamdp service.

    ``predict_proba_one`` uses the latest model the service has published
    (fetched through :class:`streamdp.service.consumer.Consumer`); a newer
    version is picked up at most every ``refresh_every`` seconds with one cheap
    version check. ``learn_one`` buffers the labelled record and pushes a batch
    of ``batch_size`` records through :class:`streamdp.service.producer.Producer`;
    the service's workers noise and merge it. Labels therefore reach the model
    with a delay (the batch, then the worker), exactly as in production, so
    ``river.evaluate.progressive_val_score`` measures the live service end to end.

    Parameters
    ----------
    redis_url
        URL of the service's Redis (with the producer's and consumer's rights); ``None`` (the default):
        ``$REDIS_URL``, else ``redis://localhost:6379/0``, as the CLI, ``Producer`` and ``Consumer`` read it.
    model
        Name of the model in the service registry.
    batch_size
        Records per push to the record stream.
    refresh_every
        Seconds between two checks for a newer published version (0: every prediction).
    wait_first
        Seconds to wait for a first published model when none exists yet.
    on_invalid
        ``"dead-letter"`` (default: records that break the schema go to the
        service's dead-letter stream) or ``"raise"``.
    sync_timeout
        ``0`` (default): fully asynchronous, predictions use whatever the
        service has published so far, lag included (what a live client sees).
        ``> 0``: after each push, wait up to that many seconds for the service
        to publish a newer version, so the measurement does not depend on how
        fast the workers keep up. Under ``release="batch"`` the next version
        holds the pushed batch (the model lags by at most one batch, like
        :class:`~streamdp.river.forest.PrivateForestClassifier`); under
        ``window``/``tree``/``grow`` it is the next window's release, which may
        close before the batch is added (the batch is then in the one after).

    Notes
    -----
    Before the service has published a release (the model's empty version 0
    included) ``predict_proba_one`` returns ``{}`` (river then skips the metric update). Call :meth:`flush` at the end
    of a stream to push the last partial batch.
    """

    def __init__(
        self,
        redis_url: str | None = None,
        model: str = "default",
        batch_size: int = 100,
        refresh_every: float = 0.5,
        wait_first: float = 0.0,
        on_invalid: str = "dead-letter",
        sync_timeout: float = 0.0,
    ):
        from streamdp.service.codec import MAX_RECORDS
        from streamdp.service.producer import ON_INVALID

        # checked here, not at the first push (batch_size=0 or on_invalid="bogus" would be taken silently)
        self.redis_url = redis_url
        self.model = model
        self.batch_size = check_integer(batch_size, "batch_size", high=MAX_RECORDS)
        self.refresh_every = check_number(refresh_every, "refresh_every (seconds)", low=0)
        self.wait_first = check_number(wait_first, "wait_first (seconds)", low=0)
        self.on_invalid = check_choice(on_invalid, "on_invalid", ON_INVALID)
        self.sync_timeout = check_number(sync_timeout, "sync_timeout (seconds)", low=0)
        self._producer = None
        self._consumer = None
        self._forest = None
        self._version = -1
        self._checked = -math.inf  # (the first refresh always runs, whatever refresh_every)
        self._buf_x: list[dict] = []
        self._buf_y: list = []
        self.n_pushed = 0
        # Batch ids are derived from the content and the source (Producer): each flush gets its own source, so
        # repeated records in a later flush are new records (they were merged once for the model's lifetime),
        # while a retried flush (n_pushed moves only after a push succeeds) keeps its id and counts once.
        self._source = f"river-{uuid.uuid4().hex}"

    @property
    def _multiclass(self) -> bool:
        return True

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_producer"] = state["_consumer"] = None
        state["_checked"] = -math.inf  # (another process's clock)
        return state

    def _clients(self):
        """The producer and consumer of the model, made together (a model that does not exist yet raises
        ``ModelNotFound`` and leaves neither, so a later call, once it exists, makes both: a consumer kept
        without its producer would break every later push)."""
        if self._consumer is None or self._producer is None:
            from streamdp.service.consumer import Consumer
            from streamdp.service.producer import Producer

            # the producer first: it refuses a missing model before any consumer client is opened
            producer = Producer(self.redis_url, self.model, batch_size=self.batch_size, on_invalid=self.on_invalid)
            self._consumer, self._producer = Consumer(self.redis_url, self.model), producer
        return self._producer, self._consumer

    @property
    def version(self) -> int:
        """Version of the published model in use (-1 before the first one)."""
        return self._version

    def refresh(self, force: bool = False) -> None:
        """Pick up a newer published model if there is one.

        Cheap when there is none: one ``HGET`` of the published version, at
        most every ``refresh_every`` seconds; the new version (its counts, or
        a grown release's blob) is fetched and validated only when it moved.
        """
        now = time.monotonic()
        # (throttled while the model does not exist yet too: each prediction opened clients to learn so)
        if (
            not force
            and (self._forest is not None or self._producer is None)
            and now - self._checked < self.refresh_every
        ):
            return
        self._checked = now
        from streamdp.service.registry import ModelNotFound

        try:
            _, consumer = self._clients()
            if self._forest is None and self.wait_first > 0:
                forest = consumer.wait_newer(self._version, timeout=self.wait_first)
                if forest is None:
                    return
            else:
                if consumer.version() <= self._version:
                    return
                forest = consumer.latest()
        except ModelNotFound:
            return
        if forest is not None and forest.version > self._version:
            self._forest, self._version = forest, forest.version
            self._proba = ForestView(forest)

    def predict_proba_one(self, x: dict, **kwargs) -> dict:
        """Class probabilities of ``x`` from the latest published model (refreshed first); ``{}`` while the
        service has published none, or only the empty version 0 that ``model create`` publishes (its uniform
        guesses would be scored)."""
        self.refresh()
        if self._forest is None or self._forest.n_releases == 0:
            return {}
        return self._proba.predict_proba_one(x)

    def learn_one(self, x: dict, y: Any) -> None:
        """Buffer ``(x, y)``; every ``batch_size`` records the buffer is pushed to the service (:meth:`flush`).
        An invalid record is handled as ``on_invalid`` says (by default it goes to the dead-letter stream)."""
        # integer keys stand for digit attribute names (river's SEA, LED, Hyperplane), as for the other classifiers
        self._buf_x.append({str(k) if type(k) is int else k: v for k, v in x.items()})
        self._buf_y.append(y.item() if isinstance(y, np.generic) else y)
        if len(self._buf_x) >= self.batch_size:
            self.flush()

    def flush(self) -> None:
        """Push the buffered labelled records to the service now."""
        if not self._buf_x:
            return
        from streamdp.service.registry import ModelNotFound

        producer, consumer = self._clients()
        before = self._version
        if self.sync_timeout > 0:
            # The version is read before the push: read after it, a worker that already released this batch
            # would make the wait below look for one more release and time out.
            try:
                before = max(before, consumer.version())
            except ModelNotFound:
                pass
        producer.push(self._buf_x, self._buf_y, source=f"{self._source}:{self.n_pushed}")
        self.n_pushed += len(self._buf_x)
        self._buf_x, self._buf_y = [], []
        if self.sync_timeout > 0:
            try:
                forest = consumer.wait_newer(before, timeout=self.sync_timeout)
            except ModelNotFound:
                forest = None
            if forest is not None and forest.version > self._version:
                self._forest, self._version = forest, forest.version
                self._proba = ForestView(forest)
                self._checked = time.monotonic()
