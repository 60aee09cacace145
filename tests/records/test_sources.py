"""Streamdp.records.sources: CSV and DataFrames coded chunk by chunk, against Schema.encode, with value-free reasons."""

from __future__ import annotations

import io
import re

import numpy as np
import pandas as pd
import pytest

from streamdp import Schema
from streamdp.records.datasets import load
from streamdp.records.sources import SourceError, encode_frame, frame_chunks, prefetch, read_csv_chunks, read_dataset

DS = load("congressional-voting")
MIXED = Schema.from_dict(
    {
        "attributes": [
            {"name": "n", "type": "categorical", "values": [1, 2, 10]},
            {"name": "b", "type": "categorical", "values": [True, False]},
            {"name": "s", "type": "categorical", "values": ["red", "blue"]},
            {"name": "x", "type": "numeric", "min": 0, "max": 5},
        ],
        "label": {"name": "y", "values": ["no", "yes"]},
    }
)


def _votes_csv(rows=DS.X, labels=DS.y) -> str:
    out = io.StringIO()
    pd.DataFrame(rows, columns=DS.schema.names).assign(party=labels).to_csv(out, index=False)
    return out.getvalue()


@pytest.mark.parametrize("chunk_rows", [1, 7, 100, 10_000])
def test_csv_chunks_equal_schema_encode(chunk_rows):
    chunks = list(read_csv_chunks(io.StringIO(_votes_csv()), DS.schema, chunk_rows=chunk_rows))
    ref = DS.schema.encode(DS.X, DS.y)
    assert [c.offset for c in chunks] == list(range(0, len(DS.y), chunk_rows))
    assert np.array_equal(np.concatenate([c.X for c in chunks]), ref.X)
    assert np.array_equal(np.concatenate([c.y for c in chunks]), ref.y)


def test_csv_text_spells_declared_values_and_numbers():
    text = "y,x,s,b,n\nyes, 3.5 ,red,TRUE,10\nno,9,blue,false,2\nno,-1, blue ,True,1\n"
    (c,) = read_csv_chunks(io.StringIO(text), MIXED)
    assert c.X.tolist() == [[2, 0, 0, 3.5], [1, 1, 1, 5.0], [0, 0, 1, 0.0]] and c.y.tolist() == [1, 0, 0]


def test_errors_name_attribute_and_row_never_the_value():
    text = "n,b,s,x,y\n1,true,red,1,no\n2,true,SECRET-VALUE,1,no\n"
    with pytest.raises(SourceError) as e:
        list(read_csv_chunks(io.StringIO(text), MIXED, chunk_rows=1))
    # the second record is the file's line 3 (the header is line 1)
    assert "line 3: attribute 's'" in str(e.value) and "SECRET" not in str(e.value)
    bad = (
        "n,b,s,x,y\n1,true,red,1,no\n3,true,red,1,no\n1,yes,red,1,no\n1,true,red,abc,no\n1,true,red,,no\n"
        "1,true,red,1,maybe\n,true,red,1,no\n1,true,red,2,yes\n"
    )
    chunks = list(read_csv_chunks(io.StringIO(bad), MIXED, on_invalid="drop", chunk_rows=3))
    dropped = [(c.offset + r, why) for c in chunks for r, why in c.dropped]
    assert dropped == [
        (1, "attribute 'n' has a value not declared in the schema"),
        (2, "attribute 'b' has a value not declared in the schema"),
        (3, "attribute 'x' is not a number"),
        (4, "attribute 'x' is missing"),
        (5, "label 'y' has a class not declared in the schema"),
        (6, "attribute 'n' is missing"),
    ]
    assert sum(len(c.y) for c in chunks) == 2 and [c.n_in for c in chunks] == [3, 3, 2]


def test_check_columns_reads_the_first_record_as_the_reader_does(tmp_path):
    """Check_columns (a job's pre-charge check) reads the first record with pandas, as read_csv_chunks reads the
    file: a gzip file is read, not refused as garbage (the csv module read its compressed bytes); blank lines
    are skipped; trailing commas pass; a wider or narrower record and a label that is not a class are refused."""
    import gzip

    from streamdp.records.sources import check_columns

    rows = "\n\nyes,1,true,red,2\nno,10,false,blue,1\n"
    gz = tmp_path / "plain.csv.gz"
    gz.write_bytes(gzip.compress(rows.encode()))
    check_columns(str(gz), MIXED, header=False)
    assert sum(len(c.y) for c in read_csv_chunks(str(gz), MIXED, header=False)) == 2
    cases = {
        "yes,1,true,red,2,,\n": None,
        "id7,yes,1,true,red,2\n": "its first record has 6 fields",
        "yes,1,true,red\n": "its first record has 4 fields",
        "maybe,1,true,red,2\n": "is not one of the classes",
        "\n\n": "empty file",
        "": "empty file",
    }
    for text, error in cases.items():
        p = tmp_path / "f.csv"
        p.write_text(text)
        if error is None:
            check_columns(str(p), MIXED, header=False)
        else:
            with pytest.raises(SourceError, match=error):
                check_columns(str(p), MIXED, header=False)


def test_values_named_like_missing_are_values_and_broken_archives_are_refused_in_words(tmp_path):
    """Pandas' default read "NA", "null", "None", "nan" as missing, so a class of that name
    passed check_columns and its rows were dropped after a job's charge; a truncated or corrupt compressed file,
    or one whose library is missing, escaped as a traceback from the checks and the reader."""
    import gzip

    from streamdp.records.sources import check_columns, check_header

    s = Schema.from_dict(
        {
            "attributes": [{"name": "a", "type": "categorical", "values": ["None", "x"]}],
            "label": {"name": "y", "values": ["NA", "null", "nan", "ok"]},
        }
    )
    p = tmp_path / "na.csv"
    p.write_text("y,a\nNA,None\nnull,x\nnan,None\nok,x\n,x\n")  # the last row's label is missing
    check_columns(str(p), s)
    X, y = read_dataset(str(p), s)
    assert y.tolist() == [0, 1, 2, 3] and X[:, 0].tolist() == [0, 1, 0, 1]
    good = gzip.compress(b"y,a\n" + b"ok,x\n" * 5000)
    cases = {
        "cut.csv.gz": good[: len(good) // 2],
        "bad.csv.gz": b"\x1f\x8b" + b"\x00" * 40,
        "odd.csv.zst": b"(\xb5/\xfd" + b"\x00" * 20,
        "bad.csv.bz2": b"BZh9" + b"\x00" * 40,
    }
    for fname, data in cases.items():
        f = tmp_path / fname
        f.write_bytes(data)
        for i, read in enumerate(
            (
                lambda: list(read_csv_chunks(str(f), s)),
                lambda: check_header(str(f), s),
                lambda: check_columns(str(f), s, header=False),
            )
        ):
            try:
                read()
            except SourceError as e:
                assert "compressed" in str(e) and "ok" not in str(e) and str(f) in str(e), str(e)  # (fixed words)
            else:  # the checks read the first line only: the cut file's is intact; the whole read must fail
                assert i > 0 and fname == "cut.csv.gz", (fname, i)


def test_csv_header_and_no_header_errors():
    with pytest.raises(SourceError, match="lacks the columns") as e:
        list(read_csv_chunks(io.StringIO("n,b\n1,true\n"), MIXED))
    assert "--no-header" not in str(e.value)  # a header that names some columns: no hint
    with pytest.raises(SourceError, match="no header row: read it with header=False"):  # a record read as header
        list(read_csv_chunks(io.StringIO("yes,1,true,red,2\n"), MIXED))
    with pytest.raises(SourceError, match="empty"):
        list(read_csv_chunks(io.StringIO(""), MIXED))
    (c,) = read_csv_chunks(io.StringIO("yes,1,true,red,2\n"), MIXED, header=False)
    assert c.X.tolist() == [[0, 0, 0, 2.0]] and c.y.tolist() == [1]
    (c,) = read_csv_chunks(io.StringIO("1,true,red,2,no\n"), MIXED, header=False, label=-1)
    assert c.y.tolist() == [0]
    for bad in (5, -6, True):  # 5 columns: a wrapped index used to shift every column silently
        with pytest.raises(SourceError, match="outside the 5 columns"):
            list(read_csv_chunks(io.StringIO("1,true,red,2,no\n"), MIXED, header=False, label=bad))


def test_frames_and_arrays_code_like_schema_encode():
    rng = np.random.default_rng(0)
    X = np.empty((500, 4), dtype=object)
    X[:, 0] = rng.choice([1, 2, 10], 500)
    X[:, 1] = rng.choice([True, False], 500)
    X[:, 2] = rng.choice(["red", "blue"], 500)
    X[:, 3] = rng.uniform(-1, 6, 500)
    y = rng.choice(["no", "yes"], 500)
    ref = MIXED.encode(X, y)
    df = pd.DataFrame(X, columns=MIXED.names).astype({"n": int, "b": bool, "s": "category", "x": float})
    for inp in (X, df, df[["x", "s", "b", "n"]], [dict(zip(MIXED.names, r)) for r in X]):
        chunks = list(frame_chunks(inp, y, MIXED, chunk_rows=128))
        assert np.array_equal(np.concatenate([c.X for c in chunks]), ref.X)
        assert np.array_equal(np.concatenate([c.y for c in chunks]), ref.y)
    # True is not the declared 1, 1 is not the declared True
    enc = encode_frame(
        MIXED,
        pd.DataFrame({"n": [True, 1], "b": [1, True], "s": ["red"] * 2, "x": [1, 1]}, dtype=object),
        ["no", "no"],
        on_invalid="drop",
    )
    assert [r for r, _ in enc.dropped] == [0] and enc.X.tolist() == [[0, 0, 0, 1.0]]
    with pytest.raises(SourceError, match=r"record 1 \(0-based\): attribute 'x' is not a number"):
        encode_frame(
            MIXED, pd.DataFrame({"n": [1, 1], "b": [True] * 2, "s": ["red"] * 2, "x": [1.0, True]}), ["no", "no"]
        )


def test_read_dataset_drops_and_prefetch_raises(tmp_path):
    p = tmp_path / "v.csv"
    labels = DS.y.copy()
    labels[3] = "whig"
    p.write_text(_votes_csv(labels=labels))
    X, y = read_dataset(str(p), DS.schema)
    keep = np.arange(len(DS.y)) != 3
    assert np.array_equal(X, DS.schema.encode(DS.X[keep], DS.y[keep]).X) and len(y) == len(DS.y) - 1

    def boom():
        yield 1
        raise SourceError("row 9: broken")

    it = prefetch(boom())
    assert next(it) == 1
    with pytest.raises(SourceError, match="row 9"):
        next(it)


def test_unreadable_files_are_refused_in_words_that_quote_nothing(tmp_path):
    """Job failure reasons (after the charge) quoted the readers' messages: the bytes and
    position of a decoding error, the row of an unbalanced quote."""
    s = load("congressional-voting").schema
    head = ",".join([*s.names, s.label.name]) + "\n"
    bad_utf8 = tmp_path / "a.csv"
    bad_utf8.write_bytes(head.encode() + b"y,n,\xe1\xff" + b",y" * 14 + b",democrat\n")
    quote = tmp_path / "b.csv"
    quote.write_text(head + ("y," * 16 + "democrat\n") * 3 + 'y,"n,' + "y," * 14 + "democrat\n")
    for path, words in ((bad_utf8, "not UTF-8 text"), (quote, "line 5: malformed CSV")):
        with pytest.raises(SourceError, match=words) as e:
            list(read_csv_chunks(str(path), s))
        # the line number is ours (taken as a number); nothing of the reader's message (bytes, positions, rows)
        assert not re.search(r"xe1|position|row \d|C error|tokeniz|democrat", str(e.value).split(": ", 1)[1])
    header_bytes = tmp_path / "c.csv"
    header_bytes.write_bytes(b"\xe1\xff," + head.encode())
    with pytest.raises(SourceError, match="cannot read its header: not UTF-8 text"):
        list(read_csv_chunks(str(header_bytes), s))


def _mixed_csv(n, header=True):
    rows = [
        f"{[1, 2, 10][i % 3]},{'true' if i % 2 else 'false'},{'red' if i % 5 else 'blue'},{i % 6},"
        f"{'yes' if i % 7 else 'no'}\n"
        for i in range(n)
    ]
    return ("n,b,s,x,y\n" if header else "") + "".join(rows), rows


def test_one_trailing_comma_per_row_reads():
    """Files exported with a trailing comma on every data row read as without (refusing them refused files that
    read correctly before)."""
    text, rows = _mixed_csv(10)
    trailing = "".join(ln.rstrip("\n") + ",\n" for ln in text.splitlines(keepends=True)[1:])
    with_commas = text.splitlines(keepends=True)[0] + trailing
    for t in (with_commas, text):
        (c,) = read_csv_chunks(io.StringIO(t), MIXED)
        (d,) = read_csv_chunks(io.StringIO(text), MIXED)
        assert np.array_equal(c.X, d.X) and np.array_equal(c.y, d.y)


@pytest.mark.parametrize("header", [True, False])
@pytest.mark.parametrize("extra", [",,", ",5", ",x", "," * 5_000_000], ids=["two-commas", "value", "text", "5M-commas"])
def test_a_row_wider_than_the_header_is_an_error_naming_its_line(header, extra):
    """One trailing comma is a common export artefact; more fields, or a value past the last column, are no
    record of the schema (a row of 5,000,000 trailing commas was pushed as a valid record)."""
    text, rows = _mixed_csv(10, header=header)
    lines = text.splitlines(keepends=True)
    at = 6
    lines[at] = lines[at].rstrip("\n") + extra + "\n"
    kw = {} if header else {"header": False, "label": -1}
    for chunk_rows in (1, 4, 100):
        with pytest.raises(SourceError, match=f"line {at + 1}: ") as e:
            list(read_csv_chunks(io.StringIO("".join(lines)), MIXED, chunk_rows=chunk_rows, **kw))
        assert len(str(e.value)) < 300


def test_csv_value_errors_name_the_file_line():
    text, _ = _mixed_csv(10)
    lines = text.splitlines(keepends=True)
    lines[7] = lines[7].replace("red", "SECRET", 1).replace("blue", "SECRET", 1)  # the 7th record: line 8
    bad = "".join(lines)
    for chunk_rows in (1, 3, 100):
        with pytest.raises(SourceError, match="line 8: attribute 's' has a value not declared") as e:
            list(read_csv_chunks(io.StringIO(bad), MIXED, chunk_rows=chunk_rows))
        assert "SECRET" not in str(e.value) and "row" not in str(e.value)
        chunks = list(read_csv_chunks(io.StringIO(bad), MIXED, chunk_rows=chunk_rows, on_invalid="drop"))
        assert [c.where(r) for c in chunks for r, _ in c.dropped] == ["line 8"]
    with pytest.raises(SourceError, match="line 7: attribute 's'"):  # without a header: no header line
        list(read_csv_chunks(io.StringIO("".join(lines[1:])), MIXED, header=False, label=-1, chunk_rows=4))
    # blank lines are skipped and not counted (as documented)
    with pytest.raises(SourceError, match="line 8: attribute 's'"):
        list(read_csv_chunks(io.StringIO("".join(lines[:3] + ["\n"] + lines[3:])), MIXED, chunk_rows=4))


def test_a_malformed_line_mid_file_is_named_after_the_chunks_before_it(tmp_path):
    """An unbalanced quote or a wide row after many records: the error names the line (a number only, the
    reader's count, blank lines included) after the chunks before it were yielded."""
    text, _ = _mixed_csv(1000)
    lines = text.splitlines(keepends=True)
    quote = lines[:601] + ['1,"true,red,1,no\n'] + lines[602:]  # line 602: the 601st record
    for body, words in ((quote, "line 602: malformed CSV: an unbalanced quote"),):
        path = tmp_path / "f.csv"
        path.write_text("".join(body))
        got = []
        with pytest.raises(SourceError, match=words) as e:
            for c in read_csv_chunks(str(path), MIXED, chunk_rows=200, on_invalid="drop"):
                got.append(c.offset)
        assert got == [0, 200, 400] and str(e.value).startswith(f"{path}: line ")
        assert not re.search(r"C error|row \d|tokeniz|red|true", str(e.value).split(": ", 1)[1])


def test_a_key_missing_from_dict_records_is_reported_missing():
    s = Schema.from_dict(
        {
            "attributes": [
                {"name": "x0", "type": "categorical", "values": ["a", "b"]},
                {"name": "x1", "type": "categorical", "values": ["a", "b"]},
            ],
            "label": {"name": "y", "values": ["neg", "pos"]},
        }
    )
    for recs, pos in (
        ([{"x0": "a"}], 0),  # x1 absent from every record: a float column of NaN
        ([{"x0": "a", "x1": "b"}, {"x0": "b", "x1": "a"}, {"x0": "a"}], 2),
    ):
        with pytest.raises(SourceError, match=rf"^record {pos} \(0-based\): attribute 'x1' is missing$"):
            list(frame_chunks(recs, ["neg"] * len(recs), s))
    (c,) = frame_chunks([{"x0": "a"}, {"x0": "b", "x1": "b"}], ["neg", "pos"], s, on_invalid="drop")
    assert c.dropped == [(0, "attribute 'x1' is missing")] and [c.where(r) for r, _ in c.dropped] == [
        "record 0 (0-based)"
    ]
    df = pd.DataFrame({"x0": ["a", "b"], "x1": [np.nan, np.nan]})  # a DataFrame's NaN: missing too
    with pytest.raises(SourceError, match="attribute 'x1' is missing"):
        encode_frame(s, df, ["neg", "pos"])


def test_records_without_labels_are_refused_by_name():
    """A user's ``Producer.push(X, None)`` failed with "object of type 'NoneType' has no len()"."""
    with pytest.raises(ValueError, match=r"y \(the labels\) is required"):
        list(frame_chunks([[1, "true", "red", 2]], None, MIXED))


def test_a_header_read_as_a_record_is_named(tmp_path):
    """A user's ``push --no-header`` of a file with a header was told its label field is not a class."""
    from streamdp.records.sources import check_columns

    p = tmp_path / "h.csv"
    p.write_text("y,n,b,s,x\nyes,1,true,red,2\n")
    with pytest.raises(SourceError, match="the file has a header row.*drop --no-header"):
        check_columns(str(p), MIXED, header=False)
    check_columns(str(p), MIXED, header=True)
    check_columns(str(p), MIXED, header=False, first_label=False)  # (a job worker before its charge reads no value)
    # a schema whose names are digits (river's SEA convention) has headerless records of digits: not a header
    digits = Schema.from_dict(
        {
            "attributes": [{"name": str(i), "type": "numeric", "min": 0, "max": 10} for i in range(3)],
            "label": {"name": "y", "values": [0, 1]},
        }
    )
    q = tmp_path / "d.csv"
    q.write_text("1,2,0,1\n")
    check_columns(str(q), digits, header=False)


def test_declared_numbers_match_their_other_spellings_in_a_csv(tmp_path):
    """A user's file, written by pandas from river's Phishing data, spelled the declared category 1 as "1.0":
    every record was refused, where river's encoder takes 1.0 for 1."""
    s = Schema.from_dict(
        {
            "attributes": [{"name": "a", "type": "categorical", "values": [0, 0.5, 1]}],
            "label": {"name": "y", "values": [False, True]},
        }
    )
    p = tmp_path / "p.csv"
    p.write_text("a,y\n1.0,True\n0.50,False\n0,True\n2.0,True\n1_0,True\n5e-1,False\n")
    X, y = read_dataset(str(p), s)
    # (2.0 is not declared, and 1_0 is no CSV writer's number, though Python's float reads it: both dropped)
    assert X[:, 0].tolist() == [2, 1, 0, 1] and y.tolist() == [1, 0, 1, 0]


def test_a_tar_archive_named_gz_is_refused_not_read_as_a_record(tmp_path):
    """A user's .tar.gz renamed .gz was read as plain gzip: the archive's header block became a record."""
    import tarfile

    from streamdp.records.sources import check_columns

    body = b"y,n,b,s,x\nyes,1,true,red,2\n"
    p = tmp_path / "d.csv.gz"
    with tarfile.open(p, "w:gz") as t:
        info = tarfile.TarInfo("d.csv")
        info.size = len(body)
        t.addfile(info, io.BytesIO(body))
    for header in (True, False):
        with pytest.raises(SourceError, match="binary bytes.*named .tar.gz"):
            check_columns(str(p), MIXED, header=header)


def test_a_frame_error_names_the_first_bad_record_not_the_first_bad_column():
    """A CSV push (and Producer.push of a DataFrame) named a missing value in record 1 before
    an undeclared value in record 0, the columns checked one after another; Schema.encode had been mended alone."""
    ds = load("congressional-voting")
    s = ds.schema
    frame = pd.DataFrame(ds.X[:3].tolist(), columns=s.names)
    frame.iloc[0, 3] = "maybe"
    frame.iloc[1, 0] = None
    with pytest.raises(SourceError, match=rf"record 0 \(0-based\): attribute '{s.names[3]}'"):
        encode_frame(s, frame)
    enc = encode_frame(s, frame, on_invalid="drop")
    assert [r for r, _ in enc.dropped] == [0, 1] and len(enc.X) == 1


def test_a_column_named_twice_is_refused_by_position_never_quoting_the_first_line():
    """A header naming a column twice is refused (pandas renamed the second 'n' to 'n.1' and read the first without
    a word). By position: in a file without a header the first line is a record, and its values must not reach a
    message (a job's status keeps its worker's refusal), nor where columns are missing."""
    names = [*MIXED.names, MIXED.label.name]
    with pytest.raises(SourceError, match=r"the header names a column twice \(again at column 2\)$"):
        list(read_csv_chunks(io.StringIO(",".join(["n", *names]) + "\n1,1,true,red,2,no\n"), MIXED))
    for first in ("SECRET,SECRET,1,true,red", "SECRET,1,true,red,2"):  # a record where a header should be
        with pytest.raises(SourceError) as e:
            list(read_csv_chunks(io.StringIO(first + "\n1,true,red,2,no\n"), MIXED))
        assert "SECRET" not in str(e.value), e.value
