"""Self-describing msgpack blobs: data only, never pickle.

A blob is a msgpack map with a ``format`` name and ``format_version``; numpy
arrays travel as ``{"dtype", "shape", "data"}`` with the raw little-endian
bytes (far faster than nested lists), or, where the writer allows it, a large
constant array as ``{"dtype", "shape", "fill": value}``. Only plain numeric dtypes are
accepted, so decoding an untrusted blob can never build an object array or
run code; every failure is a :class:`ValueError` that says what is wrong.

>>> b = dumps("demo", 1, {"a": pack_array(np.arange(3))})
>>> unpack_array(loads(b, "demo", 1)["a"]).tolist()
[0, 1, 2]
"""

from __future__ import annotations

import os
from typing import Any

import msgpack
import numpy as np

__all__ = [
    "narrowest",
    "pack_array",
    "unpack_array",
    "dumps",
    "packb",
    "packb_parts",
    "loads",
    "format_of",
    "BlobError",
]

_ALLOWED_DTYPES = {"<i1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u1", "<u2", "<u4", "<u8", "<f4", "<f8", "|b1"}
# Refuse absurd sizes before allocating anything (1 GiB per array).
_MAX_ARRAY_BYTES = 1 << 30


class BlobError(ValueError):
    """A blob is truncated, corrupted, of another format, or inconsistent."""


#: :func:`pack_array` with ``fill_ok``: a constant array at least this large travels as its shape and value.
FILL_MIN_BYTES = 1 << 16


def narrowest(a: np.ndarray) -> np.ndarray:
    """``a`` (integers) in the narrowest of int8/int16/int32/int64 that holds every value exactly (the same
    array where that is its own dtype); any other array unchanged.

    >>> narrowest(np.array([-1, 100], dtype=np.int64)).dtype, narrowest(np.array([0, 40000])).dtype
    (dtype('int8'), dtype('int32'))
    """
    a = np.asarray(a)
    if a.dtype.kind not in "iu" or not a.size:
        return a
    lo, hi = int(a.min()), int(a.max())
    for dt in (np.int8, np.int16, np.int32, np.int64):
        info = np.iinfo(dt)
        if info.min <= lo and hi <= info.max:
            return a if a.dtype == dt else a.astype(dt)
    return a


def pack_array(a: np.ndarray, fill_ok: bool = False) -> dict:
    """``{"dtype", "shape", "data"}`` of a numeric array; ``data`` views the array's memory
    (no copy), so pack right before :func:`dumps`, while the array is unchanged.

    ``fill_ok``: a constant array of at least ``FILL_MIN_BYTES`` is ``{"dtype", "shape", "fill": value}``
    (a fresh model's zero counts, at height 10 a third of its blob; an all-categorical forest's
    thresholds, all +inf). It unpacks as ``np.zeros`` (pages mapped when written) or a read-only
    broadcast of the value: no memory per element.

    >>> z = pack_array(np.zeros(10**5), fill_ok=True)
    >>> sorted(z), unpack_array(z, fill_shape=(10**5,)).shape, bool(unpack_array(z, fill_shape=(10**5,)).any())
    (['dtype', 'fill', 'shape'], (100000,), False)
    """
    a = np.asarray(a)
    if a.dtype.kind not in "iufb":
        raise TypeError(f"only numeric arrays can be packed, got dtype {a.dtype}")
    if fill_ok and a.dtype.kind in "iuf" and a.nbytes >= FILL_MIN_BYTES and bool(np.all(a == a.flat[0])):
        return {"dtype": a.dtype.newbyteorder("<").str, "shape": list(a.shape), "fill": a.flat[0].item()}
    a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
    # A view of the array's memory, not a copy: msgpack copies it once, into the blob (an empty array
    # has no memory to view).
    data = a.reshape(-1).view(np.uint8).data if a.size else b""
    return {"dtype": a.dtype.str, "shape": list(a.shape), "data": data}


def unpack_array(
    d: Any, name: str = "array", dtype: str | None = None, ndim: int | None = None, fill_shape: tuple | None = None
) -> np.ndarray:
    """The array of a :func:`pack_array` record, checked (dtype, shape, size, finite values).

    A fill record is accepted only where the caller expects one, of exactly ``fill_shape`` (known
    from the rest of the blob): anywhere else a few bytes could make the reader allocate gigabytes.
    """
    fill = isinstance(d, dict) and set(d) == {"dtype", "shape", "fill"}
    if not isinstance(d, dict) or (set(d) != {"dtype", "shape", "data"} and not fill):
        raise BlobError(f"{name}: expected an array record with dtype, shape and data")
    if fill and (isinstance(d["fill"], bool) or not isinstance(d["fill"], (int, float))):
        raise BlobError(f"{name}: 'fill' must be a number, got {d['fill']!r}")
    if fill and (fill_shape is None or d["shape"] != list(fill_shape)):
        raise BlobError(
            f"{name}: a constant record is not accepted here"
            if fill_shape is None
            else f"{name}: a constant record of shape {d['shape']!r} where {list(fill_shape)} was expected"
        )
    dt, shape, data = d["dtype"], d["shape"], None if fill else d["data"]
    if not isinstance(dt, str) or dt not in _ALLOWED_DTYPES:
        raise BlobError(f"{name}: dtype {dt!r} is not allowed")
    if dtype is not None and np.dtype(dt) != np.dtype(dtype):
        raise BlobError(f"{name}: dtype {dt} where {dtype} was expected")
    if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
        raise BlobError(f"{name}: shape must be a list of non-negative integers, got {shape!r}")
    if ndim is not None and len(shape) != ndim:
        raise BlobError(f"{name}: expected {ndim} dimensions, got shape {shape}")
    if isinstance(data, memoryview):  # straight from pack_array, not through msgpack
        data = data.cast("B") if data.format != "B" else data
    elif not fill and not isinstance(data, bytes):
        raise BlobError(f"{name}: data must be bytes")
    itemsize = np.dtype(dt).itemsize
    n = 1
    for s in shape:
        n *= s
        if n * itemsize > _MAX_ARRAY_BYTES:
            raise BlobError(f"{name}: shape {shape} is too large")
    if fill:
        native = np.dtype(dt).newbyteorder("=")
        try:
            value = np.array(d["fill"]).astype(native, casting="same_kind" if native.kind == "f" else "safe")
        except (TypeError, OverflowError, ValueError):
            raise BlobError(f"{name}: fill {d['fill']!r} is not a {dt} value") from None
        if value.item() != d["fill"] and not (np.isnan(d["fill"]) if isinstance(d["fill"], float) else False):
            raise BlobError(f"{name}: fill {d['fill']!r} is not a {dt} value")
        if native.kind == "f" and not np.isfinite(value) and name not in _INF_OK:
            raise BlobError(f"{name}: contains NaN or infinite values")
        if value == 0:
            return np.zeros(shape, dtype=native)  # writable; the OS maps its pages when written
        return np.broadcast_to(value, tuple(shape))  # read-only, one element of memory
    assert isinstance(data, (bytes, memoryview))  # checked above for every record that is not a fill
    if len(data) != n * itemsize:
        raise BlobError(f"{name}: {len(data)} bytes of data for shape {shape} of {dt} (needs {n * itemsize})")
    arr = np.frombuffer(data, dtype=dt).reshape(shape)
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)) and name not in _INF_OK:
        raise BlobError(f"{name}: contains NaN or infinite values")
    return arr.astype(arr.dtype.newbyteorder("="), copy=False)


# Arrays in which +inf is a legitimate marker (thresholds of non-numeric nodes).
_INF_OK = {"threshold"}


def dumps(fmt: str, version: int, body: dict) -> bytes:
    """A blob of format ``fmt``, version ``version``, holding ``body``'s fields (read back with :func:`loads`).

    >>> loads(dumps("demo", 1, {"x": 2}), "demo", 1)["x"]
    2
    """
    return packb({"format": fmt, "format_version": version, **body})


#: Binary values at least this long are not copied into msgpack's growing buffer by :func:`packb`.
_BIG = 1 << 16


def packb(doc: Any) -> bytes:
    """``msgpack.packb(doc, use_bin_type=True)`` with one copy of each large binary value.

    msgpack copies every value into a buffer that grows by doubling, then copies that
    buffer into the result, so it peaks at up to about three times the blob. Here each large value
    (an array's ``data`` view) is packed as a 16-byte placeholder, and the result is
    joined once from the packed pieces and the values themselves (:func:`packb_parts`):
    the peak is the blob plus what the caller already holds.

    >>> big = {"a": [1, memoryview(bytes(range(256)) * 300)], "b": b"x"}
    >>> packb(big) == msgpack.packb(big, use_bin_type=True)
    True
    """
    parts = packb_parts(doc)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def packb_parts(doc: Any) -> list:
    """:func:`packb`'s bytes as a list of pieces to write one after the other (the large binary values
    are the caller's own buffers, not copies): a sink that takes pieces (a file, Redis SET then
    APPEND) never holds the whole. Write them before changing the arrays they view.

    >>> big = {"a": memoryview(bytes(range(256)) * 300)}
    >>> parts = packb_parts(big)
    >>> len(parts), b"".join(parts) == msgpack.packb(big, use_bin_type=True)
    (4, True)
    """
    big: dict[bytes, Any] = {}

    def swap(v: Any) -> Any:
        if isinstance(v, (bytes, bytearray, memoryview)) and memoryview(v).nbytes >= _BIG:
            token = os.urandom(16)
            big[token] = v
            return token
        if isinstance(v, dict):
            return {k: swap(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [swap(x) for x in v]
        return v

    try:
        skeleton = msgpack.packb(swap(doc), use_bin_type=True)
        if not big:
            return [skeleton]
        pieces: list[Any] = []
        pos = 0
        for token, v in sorted(big.items(), key=lambda kv: skeleton.index(b"\xc4\x10" + kv[0])):
            at = skeleton.index(b"\xc4\x10" + token)  # the placeholder's bin8 header and bytes
            pieces += [skeleton[pos:at], b"\xc6" + memoryview(v).nbytes.to_bytes(4, "big"), v]  # bin32, as msgpack
            pos = at + 18
        pieces.append(skeleton[pos:])
        return pieces
    finally:
        # ``swap`` refers to itself (a cycle only the garbage collector breaks): emptied here, ``big`` no
        # longer keeps the packed arrays (views of counts-sized arrays) alive until a collection.
        big.clear()


def _unpack(blob: Any, what: str) -> dict:
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise BlobError(f"expected bytes, got {type(blob).__name__}")
    try:
        # msgpack reads any byte buffer: no copy of the blob (a bytearray or memoryview of hundreds of MB)
        data = blob if isinstance(blob, (bytes, bytearray)) else memoryview(blob).cast("B")
        doc = msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)
    except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError, TypeError) as e:
        raise BlobError(f"not a valid {what} blob: corrupted or truncated msgpack ({type(e).__name__}: {e})") from None
    except Exception as e:  # msgpack raises a handful of other types on garbage
        raise BlobError(f"not a valid {what} blob: {type(e).__name__}: {e}") from None
    if not isinstance(doc, dict):
        raise BlobError(f"not a {what} blob (a msgpack {type(doc).__name__}, not a map)")
    if not isinstance(doc.get("format"), str):  # a list or map here must not reach a dict lookup (TypeError)
        raise BlobError(f"not a {what} blob: 'format' must be a string, got {type(doc.get('format')).__name__}")
    return doc


def format_of(blob: Any) -> str:
    """The ``format`` tag of a blob (a string), for dispatching on it; :class:`BlobError` otherwise."""
    return _unpack(blob, "streamdp")["format"]


def loads(blob: Any, fmt: str, version: int | tuple[int, ...]) -> dict:
    """Decode a blob and check its format tag and version (one, or a tuple of those read); everything else is
    the caller's to validate."""
    doc = _unpack(blob, fmt)
    if doc["format"] != fmt:
        hint = ""
        if doc["format"].startswith("streamdp.") and fmt.startswith("streamdp."):  # (another model: a job's result)
            hint = ": streamdp.learners.load_model(blob) reads any streamdp model by its format"
        raise BlobError(f"not a {fmt} blob (format: {doc['format']!r}){hint}")
    versions = version if isinstance(version, tuple) else (version,)
    fv = doc.get("format_version")
    if not isinstance(fv, int) or isinstance(fv, bool) or fv not in versions:
        raise BlobError(
            f"{fmt} format version {fv!r} is not supported (this build reads {', '.join(map(str, versions))})"
        )
    return doc


def field(doc: dict, key: str, kinds: type | tuple, fmt: str = "blob") -> Any:
    """``doc[key]`` checked to be of the given type(s), with a clear error."""
    if key not in doc:
        raise BlobError(f"{fmt}: missing field {key!r}")
    v = doc[key]
    if isinstance(v, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise BlobError(f"{fmt}: field {key!r} has the wrong type (bool)")
    if not isinstance(v, kinds):
        raise BlobError(f"{fmt}: field {key!r} has the wrong type ({type(v).__name__})")
    return v
