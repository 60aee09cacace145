"""A job's data on a real Redis: the pinned copy of a dataset, and a model's retained records read once per batch."""

from __future__ import annotations

import io
import math
import os

import numpy as np
import pytest

from streamdp.jobs.runner import JobError
from streamdp.service import job_data, job_worker
from streamdp.service.connection import connect
from streamdp.service.consumer import Consumer
from streamdp.service.job_data import read_model_records
from streamdp.service.keys import Keys
from streamdp.service.ledger_store import ledger_keys
from streamdp.service.producer import Producer
from streamdp.service.registry import create_model, delete_model
from streamdp.service.retention import set_retention
from streamdp.service.stream_worker import Worker
from tests.service.conftest import VOTES  # noqa: E402

# create_model(not_private=True)'s own NotPrivateWarning, expected here
pytestmark = pytest.mark.filterwarnings("ignore:model .*NOT private:streamdp.privacy.secure_random.NotPrivateWarning")


@pytest.fixture
def r(redis_url):
    return connect(redis_url)


def test_the_pinned_copy_reads_what_the_submit_check_read(tmp_path, monkeypatch):
    """A ``.tar.gz`` file (read as a tar archive at submit) was copied under
    a ``.gz`` name and read as plain gzip after the charge (a header refused, or a headerless file's first record
    lost); a FIFO or a directory swapped in must not hang or be read; a full disk while copying is an error of
    the attempt (retried), not "changed"; the copy goes as soon as it is parsed and never has a name (a worker
    killed mid-read left its named copy behind)."""
    import contextlib
    import errno
    import hashlib
    import tarfile
    import tempfile

    from tests.records.test_sources import MIXED

    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))  # (this test's copies only, whatever runs beside it)
    rows = "yes,1,true,red,2\nno,10,false,blue,1\n" * 500
    for header in (True, False):
        body = (("y,n,b,s,x\n" if header else "") + rows).encode()
        path = tmp_path / f"h{int(header)}.tar.gz"
        info = tarfile.TarInfo("d.csv")
        info.size = len(body)
        with tarfile.open(path, "w:gz") as t:
            t.addfile(info, io.BytesIO(body))
        doc = {
            "dataset": str(path),
            "dataset_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "header": "1" if header else "0",
            "label": "null",
        }
        opened = []
        real_tf = tempfile.TemporaryFile
        monkeypatch.setattr(tempfile, "TemporaryFile", lambda *a, **kw: opened.append(real_tf(*a, **kw)) or opened[-1])
        with contextlib.ExitStack() as stack:
            load = job_data.dataset_loader(doc, MIXED, stack)
            assert len(opened) == 1 and not opened[0].closed and opened[0].seek(0, 2) == path.stat().st_size
            assert not list(private.iterdir())  # a copy, under no name: nothing a kill could leave behind
            X, y = load()
            assert len(y) == 1000, (header, len(y))
            assert opened[0].closed  # closed once parsed, before the fit
        monkeypatch.setattr(tempfile, "TemporaryFile", real_tf)
    fifo, folder = tmp_path / "fifo.csv", tmp_path / "folder.csv"
    os.mkfifo(fifo)
    folder.mkdir()
    for odd in (fifo, folder, tmp_path / "gone.csv"):
        with contextlib.ExitStack() as stack, pytest.raises(JobError, match="changed or vanished"):
            job_data.dataset_loader({"dataset": str(odd), "dataset_sha256": "0" * 64}, MIXED, stack)
    plain = tmp_path / "plain.csv"
    plain.write_text(rows)
    doc = {"dataset": str(plain), "dataset_sha256": hashlib.sha256(plain.read_bytes()).hexdigest(), "header": "0"}

    def disk_full(src, dst, limit=None):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(job_data, "stream_sha256", disk_full)
    with contextlib.ExitStack() as stack, pytest.raises(OSError, match="No space left"):
        job_data.dataset_loader(doc, MIXED, stack)
    monkeypatch.undo()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    # a file larger than the room left (a sparse terabyte filled the disk at every attempt): nothing copied; the
    # worker's trouble, not the data's: the attempt fails and is retried (another worker may have room)
    monkeypatch.setattr(job_data, "_SPARE_BYTES", 1 << 62)
    with contextlib.ExitStack() as stack, pytest.raises(OSError, match="does not fit this worker's temporary"):
        job_data.dataset_loader(doc, MIXED, stack)
    assert not list(private.iterdir())
    monkeypatch.setattr(job_data, "_SPARE_BYTES", 0)
    # the worker out of file descriptors is the attempt's error (retried), not a changed file
    real_open = os.open

    def no_fds(p, *a, **kw):
        if p == str(plain):
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(p, *a, **kw)

    monkeypatch.setattr(job_data.os, "open", no_fds)
    with contextlib.ExitStack() as stack, pytest.raises(OSError, match="Too many open files"):
        job_data.dataset_loader(doc, MIXED, stack)

    def denied(p, *a, **kw):
        if p == str(plain):
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(p, *a, **kw)

    monkeypatch.setattr(job_data.os, "open", denied)  # (root reads anything: the refusal is simulated)
    with contextlib.ExitStack() as stack, pytest.raises(JobError, match="cannot be read by the job worker"):
        job_data.dataset_loader(doc, MIXED, stack)
    monkeypatch.setattr(job_data.os, "open", real_open)
    # an attempt's error names no file (a worker's temporary path gave its process id away)
    err = job_worker._error_text(OSError(errno.EMFILE, "Too many open files", "/tmp/streamdp-job-x/votes.csv"))
    assert err == "OSError: [Errno 24] Too many open files"
    # the reader's system troubles are raised as they are (retried), a file's own as SourceError
    import pandas as pd

    from streamdp.records.sources import SourceError, check_columns

    def no_fds_read(*a, **kw):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(pd, "read_csv", no_fds_read)
    with pytest.raises(OSError, match="Too many open files") as e:
        check_columns(str(plain), MIXED, header=False)
    assert not isinstance(e.value, SourceError)
    monkeypatch.undo()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    with pytest.raises(SourceError, match="cannot read the file"):
        check_columns(str(tmp_path / "absent.csv"), MIXED, header=False)
    # the pinned bytes' columns are checked by the worker before the charge (submit read the file on its own)
    nocol = tmp_path / "nocol.csv"
    nocol.write_text("n,b,s,x\n1,true,red,2\n")
    doc = {"dataset": str(nocol), "dataset_sha256": hashlib.sha256(nocol.read_bytes()).hexdigest(), "header": "1"}
    with (
        contextlib.ExitStack() as stack,
        pytest.raises(
            JobError,
            match=r"nocol.csv: the header lacks the columns "
            r"\['y'\].*; nothing was charged",
        ),
    ):
        job_data.dataset_loader(doc, MIXED, stack)


@pytest.mark.redis
def test_a_retried_batch_is_read_once_by_jobs_as_the_stream_merges_it_once(r, unique_name):
    """A retried push (same batch id) gave a job 600 records for 300 people."""
    name = unique_name
    create_model(r, name, VOTES.schema, n_trees=2, height=2, epsilon=math.inf, release="batch", not_private=True)
    try:
        with Producer(r, name) as p:
            p.push(VOTES.X[:300], VOTES.y[:300], batch_id="retried-1")
            p.push(VOTES.X[:300], VOTES.y[:300], batch_id="retried-1")  # the retry
            p.push(VOTES.X[300:400], VOTES.y[300:400], batch_id="other-2")
        assert r.xlen(Keys(name).records) == 3
        X, y = read_model_records(r, name, VOTES.schema, chunk=2)  # the duplicate falls in a later chunk
        enc = VOTES.schema.encode(VOTES.X[:400], VOTES.y[:400])
        assert len(y) == 400
        np.testing.assert_array_equal(X, enc.X)
        np.testing.assert_array_equal(y, enc.y)
        set_retention(r, name, records=10)  # the stream merges the same batches once (and keeps them)
        Worker(r, name, block_ms=20).run(until_drained=True, handle_signals=False)
        assert Consumer(r, name).latest().n_releases == 2
        assert len(read_model_records(r, name, VOTES.schema)[1]) == 400
    finally:
        delete_model(r, name)
        r.delete(*ledger_keys(name))


def test_a_truncated_compressed_file_is_refused_before_the_charge(tmp_path):
    """A user's truncated .csv.gz was charged, then failed when parsed; the job worker now reads the pinned
    copy through its decompression before the charge (bytes, not records). An archive of several files is named
    so (it was "values the CSV reader could not read")."""
    import contextlib
    import gzip
    import hashlib
    import zipfile

    from tests.records.test_sources import MIXED

    rng = np.random.default_rng(0)
    body = "".join(f"yes,{rng.integers(0, 10)},true,red,{rng.integers(0, 3)}\n" for _ in range(20000)).encode()
    cut = tmp_path / "cut.csv.gz"
    cut.write_bytes(gzip.compress(body)[:-5000])
    two = tmp_path / "two.zip"
    with zipfile.ZipFile(two, "w") as z:
        z.writestr("a.csv", body[:100])
        z.writestr("b.csv", body[:100])
    for path, why in [(cut, "cut short or corrupt"), (two, "an archive of several files")]:
        doc = {"dataset": str(path), "dataset_sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "header": "0"}
        with contextlib.ExitStack() as stack, pytest.raises(JobError, match=f"{why}.*nothing was charged"):
            job_data.dataset_loader(doc, MIXED, stack)
    whole = tmp_path / "whole.csv.gz"
    whole.write_bytes(gzip.compress(body))
    doc = {"dataset": str(whole), "dataset_sha256": hashlib.sha256(whole.read_bytes()).hexdigest(), "header": "0"}
    plain = tmp_path / "plain.csv"
    plain.write_bytes(body)
    want = len(job_data.read_dataset(str(plain), MIXED, header=False)[1])
    with contextlib.ExitStack() as stack:
        assert want > 1000 and len(job_data.dataset_loader(doc, MIXED, stack)()[1]) == want  # (rewound after)
