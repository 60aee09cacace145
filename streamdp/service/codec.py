"""The batch envelope that travels on a model's record stream.

One stream entry has one field ``d``: a msgpack map

``{"format": "streamdp.batch", "format_version": 1, "batch_id": str, "t": float, "kind": ...}``

* ``kind="codes"``: ``X`` is a raw little-endian numpy array (``blob.pack_array``)
  of schema codes (``|u1``/``<u2`` when every attribute is categorical, else
  ``<f8``), ``y`` the label codes; the producer encoded the records.
* ``kind="records"``: ``records`` is a list of dicts (or rows in schema order)
  and ``labels`` the raw labels; the worker encodes them.

``ids`` (optional) holds one privacy id per row (str or bytes, at most
:data:`~streamdp.service.units.MAX_ID_BYTES`), for a model whose unit is a
person (:mod:`.units`); a row whose id is missing or too long is dropped.

``invalid`` (optional) lists ``[row, reason]`` of rows the producer already
rejected, so they reach the dead-letter stream. The producer assigns
``batch_id`` (a uuid): a retried XADD of the same batch is merged once.

The worker never trusts an entry: :func:`decode` checks every field and every
code against the schema and raises :class:`EnvelopeError` (a reason for the
dead-letter stream) for an undecodable entry; bad rows of a decodable entry
are dropped and listed in :attr:`Batch.dropped`.

>>> from streamdp.records.datasets import load
>>> ds = load("congressional-voting")
>>> env = encode_batch(ds.schema, ds.X[:3], ds.y[:3], batch_id="b1")
>>> b = decode(ds.schema, env)
>>> b.batch_id, b.X.shape, b.dropped
('b1', (3, 16), [])
"""

from __future__ import annotations

import hashlib
import math
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

from streamdp import blob
from streamdp.records import read_errors
from streamdp.records.coding import plain_value
from streamdp.records.domains import Categorical
from streamdp.records.schema import Schema
from streamdp.service.units import MAX_ID_BYTES

__all__ = [
    "Batch",
    "EnvelopeError",
    "encode_batch",
    "encode_records",
    "decode",
    "decode_entry",
    "entry_detail",
    "value_free",
    "FORMAT",
    "MAX_RECORDS",
    "DEAD_HEAD",
    "DEAD_REASON_MAX",
    "DEAD_DETAIL_MAX",
    "dead_letter",
]

FORMAT = "streamdp.batch"
FORMAT_VERSION = 1
MAX_RECORDS = 1_000_000  # per entry; producers split larger inputs
MAX_ENTRY_BYTES = 64 << 20
# A dead letter is bounded in bytes: a producer allowed only XADD must not fill Redis through the dead-letter stream.
DEAD_HEAD = 64  # bytes of an undecodable payload its dead letter keeps, where the model retains raw records
DEAD_REASON_MAX = 500  # characters of a dead letter's reason
DEAD_DETAIL_MAX = 2048  # bytes of a dead letter's detail (what does not fit is replaced by its size)
_BATCH_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,64}$")


class EnvelopeError(ValueError):
    """An entry that cannot be decoded at all (goes to the dead-letter stream whole)."""


@dataclass
class Batch:
    batch_id: str
    X: np.ndarray  # float64 (n, n_attributes), validated codes / clamped numbers
    y: np.ndarray  # int64 (n,)
    t: float | None = None  # producer wall time (freshness)
    dropped: list[tuple[int, str]] = field(default_factory=list)
    n_in: int = 0  # rows in the entry (valid + dropped)
    ids: list | None = None  # the kept rows' privacy ids (str or bytes), when the entry carries them


def new_batch_id() -> str:
    return uuid.uuid4().hex


def _code_dtype(schema: Schema) -> str:
    if bool(schema.is_categorical.all()):
        top = int(schema.arities.max())
        return "|u1" if top <= 0xFF else "<u2" if top <= 0xFFFF else "<f8"
    return "<f8"


def _label_dtype(schema: Schema) -> str:
    return "|u1" if schema.n_classes <= 0xFF else "<u2" if schema.n_classes <= 0xFFFF else "<i4"


def _pack(doc: dict) -> bytes:
    return msgpack.packb(
        {"format": FORMAT, "format_version": FORMAT_VERSION, **doc}, use_bin_type=True, default=plain_value
    )


def encode_batch(
    schema: Schema,
    X: Any,
    y: Any,
    *,
    batch_id: str | None = None,
    on_invalid: str = "raise",
    encoded: bool = False,
    ids: Any = None,
) -> bytes:
    """Encode records (any input :meth:`Schema.encode` takes) into a compact ``codes`` envelope.

    ``on_invalid="raise"`` raises on the first bad record; ``"dead-letter"``
    keeps the valid rows and lists the bad ones (row, reason) so the worker
    dead-letters them. ``encoded=True``: ``X``/``y`` are already codes. ``ids``: one privacy id per record.
    """
    if on_invalid not in ("raise", "dead-letter"):
        raise ValueError(f"on_invalid must be 'raise' or 'dead-letter', got {on_invalid!r}")
    if encoded:
        Xc, yc, dropped = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.int64), []
    else:
        enc = schema.encode(X, y, on_invalid="raise" if on_invalid == "raise" else "drop")
        Xc, yc, dropped = enc.X, enc.y, enc.dropped
        if ids is not None:
            given = list(ids)
            if len(given) != len(enc.kept) + len(dropped):
                raise ValueError(f"{len(given)} privacy ids for {len(enc.kept) + len(dropped)} records")
            ids = [given[i] for i in enc.kept]
    dt = _code_dtype(schema)
    doc = {
        "batch_id": batch_id or new_batch_id(),
        "t": time.time(),
        "kind": "codes",
        "X": blob.pack_array(Xc.astype(dt)),
        "y": blob.pack_array(yc.astype(_label_dtype(schema))),
    }
    if ids is not None:
        doc["ids"] = _ids_list(ids, len(yc))
    if dropped:  # (rows of the input: the envelope's rows are the valid ones, in order)
        doc["invalid"] = [[int(r), value_free(schema, str(reason))] for r, reason in dropped]
    return _pack(doc)


def _ids_list(ids: Any, n: int) -> list:
    """Privacy ids for an envelope: str or bytes as they are, None and NaN as "" (missing: the row is dropped)."""
    out = [
        v if isinstance(v, (bytes, str)) else "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)
        for v in ids
    ]
    if len(out) != n:
        raise ValueError(f"{len(out)} privacy ids for {n} records")
    return out


def encode_records(records: list, labels: list, *, batch_id: str | None = None, ids: Any = None) -> bytes:
    """A ``records`` envelope: raw values, validated and encoded by the worker (``ids``: one privacy id each).

    numpy scalars, ``Decimal`` and ``Fraction`` go as plain numbers; a value of another type raises
    ``TypeError`` naming its type.

    >>> from decimal import Decimal
    >>> len(encode_records([[Decimal("0.5"), Decimal("sNaN")]], [Decimal("1")], batch_id="b")) > 0
    True
    >>> encode_records([[object()]], [0], batch_id="b")
    Traceback (most recent call last):
    ...
    TypeError: a value of type object cannot be sent: numbers, text, bytes, None, lists and maps only
    """
    recs = list(records)
    doc: dict[str, Any] = {
        "batch_id": batch_id or new_batch_id(),
        "t": time.time(),
        "kind": "records",
        "records": recs,
        "labels": list(labels),
    }
    if ids is not None:
        doc["ids"] = _ids_list(ids, len(recs))
    return _pack(doc)


def encode_codes(
    schema: Schema, X: np.ndarray, y: np.ndarray, *, batch_id: Any, invalid: Any = (), ids: Any = None
) -> bytes:
    """A ``codes`` envelope of already coded records (:mod:`streamdp.records.sources` chunks).

    ``batch_id`` is a string, or a function of the packed ``X`` and ``y`` arrays returning one
    (content-derived ids). ``invalid`` lists ``(row, reason)`` of rows left out; the reasons
    must name no value (:mod:`streamdp.records.sources` words them so).
    """
    xb = np.ascontiguousarray(X.astype(_code_dtype(schema), copy=False))
    yb = np.ascontiguousarray(y.astype(_label_dtype(schema), copy=False))
    doc = {
        "batch_id": batch_id(xb, yb) if callable(batch_id) else batch_id,
        "t": time.time(),
        "kind": "codes",
        "X": blob.pack_array(xb),
        "y": blob.pack_array(yb),
    }
    if len(invalid):
        doc["invalid"] = [[int(r), value_free(schema, str(reason))] for r, reason in invalid]
    if ids is not None:
        doc["ids"] = _ids_list(ids, len(yb))
    return _pack(doc)


def peek_batch_id(data: Any) -> str | None:
    """The batch id of an envelope, or None (for logs and dead letters)."""
    try:
        doc = msgpack.unpackb(bytes(data), raw=False, strict_map_key=True)
        bid = doc.get("batch_id") if isinstance(doc, dict) else None
        return bid if isinstance(bid, str) and _BATCH_ID.fullmatch(bid) else None
    except Exception:
        return None


def decode(schema: Schema, data: Any) -> Batch:
    """Validate one entry's payload against ``schema``; raise :class:`EnvelopeError` with a reason."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise EnvelopeError(f"payload must be bytes, got {type(data).__name__}")
    if len(data) > MAX_ENTRY_BYTES:
        raise EnvelopeError(f"payload of {len(data)} bytes exceeds {MAX_ENTRY_BYTES}")
    try:
        doc = msgpack.unpackb(
            bytes(data),
            raw=False,
            strict_map_key=True,
            use_list=True,
            max_array_len=MAX_RECORDS + 1,
            max_map_len=100_000,
        )
    except Exception as e:  # msgpack raises many types on garbage
        raise EnvelopeError(f"not msgpack ({type(e).__name__}: {str(e)[:200]})") from None
    if not isinstance(doc, dict):
        raise EnvelopeError(f"envelope must be a map, got {type(doc).__name__}")
    fv = doc.get("format_version")
    if doc.get("format") != FORMAT or type(fv) is not int or fv != FORMAT_VERSION:
        raise EnvelopeError(
            f"not a {FORMAT} v{FORMAT_VERSION} envelope (format {doc.get('format')!r} v{doc.get('format_version')!r})"
        )
    bid = doc.get("batch_id")
    if not isinstance(bid, str) or not _BATCH_ID.fullmatch(bid):
        raise EnvelopeError(f"batch_id must be 1-64 characters of [A-Za-z0-9_.:-], got {str(bid)[:80]!r}")
    t = doc.get("t")
    if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t)):
        raise EnvelopeError("t must be a finite number")
    kind = doc.get("kind")
    if kind == "codes":
        X, y, dropped, n, kept = _decode_codes(schema, doc)
    elif kind == "records":
        X, y, dropped, n, kept = _decode_records(schema, doc)
    else:
        raise EnvelopeError(f"kind must be 'codes' or 'records', got {str(kind)[:40]!r}")
    inv = doc.get("invalid", [])
    if not isinstance(inv, list) or len(inv) > MAX_RECORDS:
        raise EnvelopeError("invalid must be a list of [row, reason]")
    pre = []
    for item in inv:
        if (
            not isinstance(item, list)
            or len(item) != 2
            or isinstance(item[0], bool)
            or not isinstance(item[0], int)
            or not isinstance(item[1], str)
        ):
            raise EnvelopeError("invalid must be a list of [row, reason]")
        pre.append((int(item[0]), "producer: " + value_free(schema, item[1])))
    ids = None
    if "ids" in doc:
        raw = doc["ids"]
        if not isinstance(raw, list) or len(raw) != n:
            raise EnvelopeError(f"ids must be a list of one privacy id per record ({n})")
        good = [isinstance(raw[i], (str, bytes)) and 0 < len(raw[i]) <= MAX_ID_BYTES for i in kept]
        if not all(good):
            for i, ok in zip(kept, good):
                if not ok:
                    dropped.append((int(i), f"privacy id missing, not a string, or longer than {MAX_ID_BYTES} bytes"))
            g = np.array(good, dtype=bool)
            X, y, kept = X[g], y[g], [i for i, ok in zip(kept, good) if ok]
        ids = [raw[i] for i in kept]
    return Batch(bid, X, y, float(t) if t is not None else None, sorted(pre + dropped), n + len(pre), ids)


def entry_detail(fields: Any, *, head: int = DEAD_HEAD) -> bytes:
    """What a dead letter keeps of a stream entry: the size of its ``d`` payload (else of its whole field map,
    msgpack), and, when ``head`` > 0, the payload's SHA-256 and first ``head`` bytes; msgpack, at most
    :data:`DEAD_DETAIL_MAX` bytes. Never the whole payload. ``head=0`` where the model retains no raw records:
    the dead letter then holds nothing of the payload but its size. Never raises.

    >>> msgpack.unpackb(entry_detail({b"d": b"x" * 100}, head=4))["head"]
    b'xxxx'
    >>> msgpack.unpackb(entry_detail({b"d": b"x" * 100}, head=0))
    {'bytes': 100}
    """
    try:
        data = fields.get(b"d", fields.get("d"))
        if not isinstance(data, bytes):
            data = msgpack.packb({_text_or_bytes(k): v for k, v in fields.items()}, use_bin_type=True)
        out: dict[str, Any] = {"bytes": len(data)}
        if head > 0:
            out.update(sha256=hashlib.sha256(data).hexdigest(), head=data[: min(head, DEAD_DETAIL_MAX // 2)])
        return msgpack.packb(out, use_bin_type=True)
    except Exception:
        return b""


def dead_letter(reason: str, detail: bytes) -> tuple[str, bytes]:
    """``(reason, detail)`` cut to the dead-letter bounds: at most :data:`DEAD_REASON_MAX` characters and
    :data:`DEAD_DETAIL_MAX` bytes (a larger detail is replaced by its size).

    >>> dead_letter("r" * 999, b"d" * 4096)[0] == "r" * DEAD_REASON_MAX, msgpack.unpackb(dead_letter("r", b"d" * 4096)[1])
    (True, {'bytes': 4096, 'cut': True})
    """
    if len(detail) > DEAD_DETAIL_MAX:
        detail = msgpack.packb({"bytes": len(detail), "cut": True})
    return reason[:DEAD_REASON_MAX], detail


def _text_or_bytes(k: Any) -> Any:
    if isinstance(k, bytes):
        try:
            return k.decode()
        except UnicodeDecodeError:
            return k
    return k


def decode_entry(
    schema: Schema, fields: Any, *, head: int = DEAD_HEAD
) -> tuple[Batch | None, tuple[str, bytes] | None]:
    """One stream entry's field map to ``(batch, None)`` or ``(None, (dead-letter reason, detail))``; the detail is
    :func:`entry_detail` (``head``: payload bytes it keeps).

    Total: any map of arbitrary bytes (or anything else) gives one of the two; nothing raises.

    >>> from streamdp.records.datasets import load
    >>> decode_entry(load("congressional-voting").schema, {b"\\xff": b"x"})[1][0]
    "entry has no 'd' field"
    """
    if fields is None:
        return None, ("entry deleted from the stream", b"")
    if not isinstance(fields, dict):
        return None, (f"entry fields must be a map, got {type(fields).__name__}", b"")
    data = fields.get(b"d", fields.get("d"))
    if data is None:
        return None, ("entry has no 'd' field", entry_detail(fields, head=head))
    try:
        return decode(schema, data), None
    except EnvelopeError as err:
        return None, dead_letter(f"undecodable: {err}", entry_detail(fields, head=head))
    except Exception as err:  # a codec bug: the entry is still dead-lettered, the worker goes on
        return None, (f"undecodable (internal {type(err).__name__})", entry_detail(fields, head=head))


def value_free(schema: Schema, reason: str) -> str:
    """A reason about a bad record reduced to the attribute (or label) and what is wrong, never the value:
    :func:`streamdp.records.read_errors.value_free` over this schema's names (the one rule; the schema's own
    reasons already follow it, a producer's are untrusted text).

    Reasons reach dead letters and worker logs: only fixed wording and the schema's own names pass.

    >>> from streamdp.records.datasets import load
    >>> s = load("congressional-voting").schema
    >>> value_free(s, "attribute 'crime' has a value not declared in the schema (declared: ['n', 'y', '?'])")
    "attribute 'crime' has a value not declared in the schema"
    >>> value_free(s, "attribute 'crime' unknown value 'alice-ssn-123'")
    "attribute 'crime' is invalid"
    >>> value_free(s, "whatever 'alice-ssn-123'")
    'invalid record'
    """
    owners = [f"attribute {a.name!r}" for a in schema.attributes] + [f"label {schema.label.name!r}"]
    return read_errors.value_free(owners, reason)


def _decode_codes(schema: Schema, doc: dict):
    try:
        X = blob.unpack_array(doc.get("X"), "X", ndim=2)
        y = blob.unpack_array(doc.get("y"), "y", ndim=1)
    except ValueError as e:
        raise EnvelopeError(str(e)) from None
    n, d = X.shape
    if d != schema.n_attributes:
        raise EnvelopeError(f"X has {d} columns, the schema has {schema.n_attributes} attributes")
    if len(y) != n:
        raise EnvelopeError(f"X has {n} rows but y has {len(y)} labels")
    if n > MAX_RECORDS:
        raise EnvelopeError(f"{n} records in one entry exceeds {MAX_RECORDS}")
    if X.dtype.kind == "b" or y.dtype.kind not in "iu":
        raise EnvelopeError(f"bad dtypes X {X.dtype} / y {y.dtype}")
    Xf = X.astype(np.float64)
    yl = y.astype(np.int64)
    if _valid_clipped(schema, Xf, yl):  # the common case, in whole-array passes; the loop below names what is wrong
        return Xf, yl, [], n, list(range(n))
    bad = np.zeros(n, dtype=bool)
    reasons: dict[int, str] = {}
    with np.errstate(invalid="ignore"):
        for j, a in enumerate(schema.attributes):
            col = Xf[:, j]
            if isinstance(a, Categorical):
                ok = np.isfinite(col) & (col >= 0) & (col < a.arity) & (col == np.floor(col))
                what = f"attribute {a.name!r}: code outside 0..{a.arity - 1} or not an integer"
            else:
                ok = np.isfinite(col)
                Xf[:, j] = np.clip(np.where(ok, col, a.min), a.min, a.max)
                what = f"attribute {a.name!r}: NaN or infinite"
            for i in np.flatnonzero(~ok & ~bad)[:10_000]:
                reasons[int(i)] = what
            bad |= ~ok
    ybad = (yl < 0) | (yl >= schema.n_classes)
    for i in np.flatnonzero(ybad & ~bad)[:10_000]:
        reasons[int(i)] = f"label code outside 0..{schema.n_classes - 1}"
    bad |= ybad
    if not bad.any():
        return Xf, yl, [], n, list(range(n))
    dropped = (
        sorted(reasons.items())
        if len(reasons) == int(bad.sum())
        else [(int(i), reasons.get(int(i), "invalid")) for i in np.flatnonzero(bad)]
    )
    return Xf[~bad], yl[~bad], dropped, n, np.flatnonzero(~bad).tolist()


def _valid_clipped(schema: Schema, Xf: np.ndarray, yl: np.ndarray) -> bool:
    """Whether every code of ``Xf`` is finite, every categorical one an integer in its range and every label in
    range (:func:`_decode_codes`' checks in a few whole-array passes instead of a few per attribute); if so, the
    numeric columns are clipped into their ranges in place, as the per-attribute loop clips them."""
    if yl.size and (int(yl.min()) < 0 or int(yl.max()) >= schema.n_classes):
        return False
    if not Xf.size:
        return True
    lo, hi = Xf.min(axis=0), Xf.max(axis=0)  # NaN propagates into both
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        return False
    cat = schema.is_categorical
    if cat.any():
        if (lo[cat] < 0).any() or (hi[cat] >= schema.arities[cat]).any():
            return False
        codes = Xf[:, cat]
        if not (codes == np.floor(codes)).all():
            return False
    for j, a in enumerate(schema.attributes):
        if not isinstance(a, Categorical) and (lo[j] < a.min or hi[j] > a.max):
            np.clip(Xf[:, j], a.min, a.max, out=Xf[:, j])
    return True


def _decode_records(schema: Schema, doc: dict):
    recs, labels = doc.get("records"), doc.get("labels")
    if not isinstance(recs, list) or not isinstance(labels, list):
        raise EnvelopeError("records and labels must be lists")
    if len(recs) != len(labels):
        raise EnvelopeError(f"{len(recs)} records but {len(labels)} labels")
    if len(recs) > MAX_RECORDS:
        raise EnvelopeError(f"{len(recs)} records in one entry exceeds {MAX_RECORDS}")
    dropped: list[tuple[int, str]] = []
    good = []
    for i, (r, lab) in enumerate(zip(recs, labels)):
        if isinstance(r, dict):
            ok = all(isinstance(k, str) for k in r)
        else:
            ok = isinstance(r, list) and len(r) == schema.n_attributes
        if not ok:
            dropped.append((i, f"record must be a map of attributes or a list of {schema.n_attributes} values"))
        elif isinstance(lab, (list, dict)):
            dropped.append((i, "label must be a scalar"))
        else:
            good.append(i)
    rows = [recs[i] for i in good]
    if rows and any(isinstance(r, dict) for r in rows) and not all(isinstance(r, dict) for r in rows):
        # mixing dicts and lists: encode the lists as dicts
        rows = [r if isinstance(r, dict) else dict(zip(schema.names, r)) for r in rows]
    try:
        enc = schema.encode(rows, [labels[i] for i in good], on_invalid="drop")
    except (ValueError, TypeError) as e:  # the shape is wrong; the message names rows and schema attributes only
        raise EnvelopeError(f"records: {str(e).split(' (its columns')[0][:300]}") from None
    dropped += [(good[r], value_free(schema, reason)) for r, reason in enc.dropped]
    return enc.X, enc.y.astype(np.int64), sorted(dropped), len(recs), [good[int(r)] for r in enc.kept]
