"""How a data source's errors are worded: fixed words naming the file, the attribute and the row, never
the data.

Reasons reach logs, dead letters and job failure reasons, so nothing here quotes a value: a bad value is
named by its attribute and row (``line 4`` of a CSV file, 1-based with the header as line 1; ``record 2
(0-based)`` in memory), a malformed file by what is wrong with it and at most numbers (a line, a count
of fields) taken from the reader's own message.
"""

from __future__ import annotations

import errno
import gzip
import lzma
import re
import tarfile
import zipfile
import zlib
from collections.abc import Iterable
from typing import Any

import pandas as pd

__all__ = [
    "SourceError",
    "InvalidRecordsWarning",
    "FILE_ERRNOS",
    "UNREADABLE",
    "MISSING_WORDS",
    "UNDECLARED_WORDS",
    "NAN_WORDS",
    "NOT_NUMBER_WORDS",
    "UNDECLARED_CLASS_WORDS",
    "BAD_VALUE_WORDS",
    "value_free",
    "row_words",
    "bad_line",
    "cannot_read",
    "unreadable",
]

# Reasons name the attribute (or label) and what is wrong in fixed words, never the value: after its owner
# ("attribute 'NAME'" or "label 'NAME'") a reason about a bad value says one of these, then at most the
# schema's own declaration in parentheses. value_free keeps any reason to them.
MISSING_WORDS = "is missing"
NAN_WORDS = "is NaN or missing"
NOT_NUMBER_WORDS = "is not a number"
UNDECLARED_WORDS = "has a value not declared in the schema"
UNDECLARED_CLASS_WORDS = "has a class not declared in the schema"
BAD_VALUE_WORDS = (MISSING_WORDS, NAN_WORDS, NOT_NUMBER_WORDS, UNDECLARED_WORDS, UNDECLARED_CLASS_WORDS)


def value_free(owners: Iterable[str], reason: str) -> str:
    """A reason about a bad record kept to its owner (one of ``owners``: the schema's ``attribute 'NAME'`` and
    ``label 'NAME'``) and one of :data:`BAD_VALUE_WORDS`; any other text after an owner becomes ``is invalid``,
    a reason naming no owner ``invalid record``. The declaration in parentheses is dropped (short dead letters).

    The one rule for reasons that leave the process (dead letters, worker logs, a producer's own reasons): only
    fixed words and the schema's names pass, whatever the text given.

    >>> value_free(["attribute 'crime'"], "attribute 'crime' has a value not declared in the schema (declared: ['n'])")
    "attribute 'crime' has a value not declared in the schema"
    >>> value_free(["attribute 'crime'"], "attribute 'crime' unknown value 'alice-ssn-123'")
    "attribute 'crime' is invalid"
    >>> value_free(["attribute 'crime'"], "whatever 'alice-ssn-123'")
    'invalid record'
    """
    owner = next((o for o in owners if reason.startswith(o)), None)  # (a name is quoted: no prefix of another)
    if owner is None:
        return "invalid record"
    rest = reason[len(owner) :]
    what = next((w for w in BAD_VALUE_WORDS if rest == f" {w}" or rest.startswith(f" {w} (declared: ")), "is invalid")
    return f"{owner} {what}"


class SourceError(ValueError):
    """A data source that cannot be read against its schema (the message names the file and what is wrong).

    ``n_pushed``: when it stopped a push part way, the records pushed before it (None otherwise)."""

    n_pushed: int | None = None


class InvalidRecordsWarning(UserWarning):
    """Records of a file the schema refuses: a job reading the file drops them."""


def row_words(i: int, row0: int, line0: int | None) -> str:
    """Row ``i`` of a frame whose first row is record ``row0`` (0-based), or file line ``line0``."""
    return f"record {row0 + i} (0-based)" if line0 is None else f"line {line0 + i}"


def bad_line(e: Exception) -> int | None:
    """The file line (1-based, as the C reader counts) that a ParserError names, else None."""
    if isinstance(e, pd.errors.ParserError):
        msg = str(e)
        m = _EOF_IN_QUOTE.search(msg)
        if m:
            return int(m.group(1)) + 1  # the reader's rows count from 0
        m = _WIDTH.search(msg) or _LINE.search(msg)
        if m:
            return int(m.group("line"))
    return None


_WIDTH = re.compile(r"Expected (?P<want>\d+) fields in line (?P<line>\d+), saw (?P<saw>\d+)")
_EOF_IN_QUOTE = re.compile(r"EOF inside string starting at row (\d+)")
_LINE = re.compile(r"\bline (?P<line>\d+)")


#: A compressed file that is cut short or corrupt (pandas decompresses by the file's suffix), or whose format's
#: library is missing: refused with fixed words like a malformed CSV.
_DECOMPRESSION: tuple[type[BaseException], ...] = (
    EOFError,
    zlib.error,
    lzma.LZMAError,
    tarfile.TarError,
    zipfile.BadZipFile,
    gzip.BadGzipFile,
    ImportError,
)
try:  # (pandas reads .zst with it when it is installed)
    from zstandard import ZstdError

    _DECOMPRESSION += (ZstdError,)
except ImportError:
    pass
UNREADABLE = (pd.errors.ParserError, UnicodeDecodeError, ValueError, *_DECOMPRESSION)


def cannot_read(name: Any, e: OSError) -> Exception:
    """A file that cannot be opened or read, in fixed words (bz2 says a corrupt stream with a plain OSError, no
    errno); the system's own troubles (out of file descriptors, a failing disk) are returned as they are, so a
    job's attempt is retried rather than failed for its data."""
    if e.errno is not None and e.errno not in FILE_ERRNOS:
        return e
    return SourceError(
        f"{name}: cannot read the file ({type(e).__name__}: missing, unreadable, or a corrupt "
        "compressed file; no content is shown)"
    )


#: Errors of the file itself (gone, unreachable, not ours to read), as opposed to the reading process's own.
FILE_ERRNOS = (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EISDIR, errno.ELOOP, errno.ENXIO)


def unreadable(e: Exception) -> str:
    """What is wrong with an unreadable file, in fixed words: the readers' own messages quote bytes, positions
    and rows of the data (they would reach job failure reasons). Only numbers are
    taken from them (a line, a count of fields), never text."""
    if isinstance(e, UnicodeDecodeError):
        return "not UTF-8 text (no content is shown)"
    if isinstance(e, ImportError):
        return f"compressed in a format whose library is not installed ({getattr(e, 'name', None) or 'unknown'})"
    if isinstance(e, _DECOMPRESSION):
        return f"a compressed file that is cut short or corrupt ({type(e).__name__}; no content is shown)"
    if isinstance(e, ValueError) and str(e).startswith("Multiple files found in"):  # (pandas' words)
        return "an archive of several files: a CSV file is read from an archive holding it alone"
    if isinstance(e, pd.errors.ParserError):
        msg = str(e)
        m = _WIDTH.search(msg)
        if m:
            return (
                f"malformed CSV: {int(m.group('saw'))} fields where {int(m.group('want'))} are expected "
                "(no content is shown)"
            )
        if _EOF_IN_QUOTE.search(msg):
            return (
                "malformed CSV: an unbalanced quote (the quoted value runs to the end of the file; no content is shown)"
            )
        return "malformed CSV: unbalanced quotes or a row of another width (no content is shown)"
    return f"values the CSV reader could not read ({type(e).__name__}; no content is shown)"
