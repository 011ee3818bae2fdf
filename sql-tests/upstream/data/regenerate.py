#!/usr/bin/env python3
# Licensed under the Apache License, Version 2.0 (see LICENSE.txt beside this file).
"""Regenerate the data files of this mirror that could not be copied from upstream.

Every file written here is a *reconstruction*: its content is derived from the
expected results in DataFusion 55.2.0's sqllogictest files (or from another
mirrored file), not copied from upstream, so its bytes differ from upstream's.
README.md lists which files these are and which .slt expectations they follow.

Usage:
    python3 regenerate.py            # write every regenerated file
    python3 regenerate.py --text     # only the CSV / JSON ones (no pyarrow needed)

The Arrow IPC and Parquet files need pyarrow (tested with pyarrow 26), e.g.
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install pyarrow
    /tmp/venv/bin/python regenerate.py

The output is deterministic (fixed seeds, no timestamps in the files).
"""

import datetime
import os
import random
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CORE = os.path.join(HERE, "datafusion", "core", "tests", "data")
TESTING_CSV = os.path.join(HERE, "testing", "data", "csv")
PARQUET_TESTING = os.path.join(HERE, "parquet-testing", "data")


def write_text(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as f:
        f.write(text)
    print("wrote", os.path.relpath(path, HERE))


def read_text(path):
    with open(path, newline="") as f:
        return f.read()


# ---------------------------------------------------------------------------
# CSV / JSON files
# ---------------------------------------------------------------------------


def gen_aggregate_simple():
    # Same 15 rows as the mirrored aggregate_simple_pipe.csv, comma-separated
    # (describe.slt, aggregate.slt, ... read it with the default delimiter).
    pipe = read_text(os.path.join(CORE, "aggregate_simple_pipe.csv"))
    text = pipe.replace("|", ",")
    if not text.endswith("\n"):
        text += "\n"
    write_text(os.path.join(CORE, "aggregate_simple.csv"), text)


def gen_timestamps():
    # ddl.slt / order.slt / group_by.slt: two rows, no header:
    #   Jorge 2018-12-13T12:12:10.011 / Andrew 2018-11-13T17:11:10.011
    # Upstream has the same two lines in timestamps.csv and in both
    # partitioned_table/c_date=*/timestamps.csv (the c_date=2018-11-13 copy is
    # mirrored from upstream; these two are written from it).
    src = read_text(os.path.join(CORE, "partitioned_table", "c_date=2018-11-13", "timestamps.csv"))
    write_text(os.path.join(CORE, "timestamps.csv"), src)
    write_text(os.path.join(CORE, "partitioned_table", "c_date=2018-12-13", "timestamps.csv"), src)


def gen_json():
    # json.slt: `SELECT a, b FROM json_test` (12 rows) and the core crate's
    # json.rs tests: schema a Int64, b Float64, c Boolean, d Utf8, 12 rows,
    # a = [1, -10, 2, 1, 7, 1, 1, 5, 1, 1, 1, 100000000000000]
    # (the historical arrow test/data/basic.json without later columns).
    rows = [
        (1, "2.0", "false", "4"),
        (-10, "-3.5", "true", "4"),
        (2, "0.6", "false", "text"),
        (1, "2.0", "false", "4"),
        (7, "-3.5", "true", "4"),
        (1, "0.6", "false", "text"),
        (1, "2.0", "false", "4"),
        (5, "-3.5", "true", "4"),
        (1, "0.6", "false", "text"),
        (1, "2.0", "false", "4"),
        (1, "-3.5", "true", "4"),
        (100000000000000, "0.6", "false", "text"),
    ]
    text = "".join('{"a":%d, "b":%s, "c":%s, "d":"%s"}\n' % r for r in rows)
    write_text(os.path.join(CORE, "2.json"), text)
    # json.slt: `SELECT mycol FROM single_nan` -> NULL (one row; the JSON
    # export of parquet-testing's single_nan.parquet writes NaN as null).
    write_text(os.path.join(CORE, "3.json"), '{"mycol":null}\n')


def gen_small_csvs():
    # ddl.slt: header only -> columns c1, c2, c3 of type Null.
    write_text(os.path.join(CORE, "empty.csv"), "c1,c2,c3\n")
    # identifiers.slt / explain.slt: columns a, b, c; one row (1, 2, 3).
    write_text(os.path.join(CORE, "example.csv"), "a,b,c\n1,2,3\n")


def gen_decimal_data():
    # decimal.slt: all 15 rows appear in its results; the row order follows the
    # `ORDER BY c1` (stable) results, e.g. 0.00004: c3 = 5, 12, 14, 8.
    rows = [
        ("0.00001", "0.000000000001", 1, "true", "0.000014"),
        ("0.00002", "0.000000000002", 2, "true", "0.000025"),
        ("0.00002", "0.000000000002", 3, "false", "0.000019"),
        ("0.00003", "0.000000000003", 4, "true", "0.000032"),
        ("0.00003", "0.000000000003", 5, "false", "0.000035"),
        ("0.00003", "0.000000000003", 5, "true", "0.000011"),
        ("0.00004", "0.000000000004", 5, "true", "0.000044"),
        ("0.00004", "0.000000000004", 12, "false", "0.000040"),
        ("0.00004", "0.000000000004", 14, "true", "0.000040"),
        ("0.00004", "0.000000000004", 8, "false", "0.000044"),
        ("0.00005", "0.000000000005", 9, "true", "0.000052"),
        ("0.00005", "0.000000000005", 4, "true", "0.000078"),
        ("0.00005", "0.000000000005", 8, "false", "0.000033"),
        ("0.00005", "0.000000000005", 100, "true", "0.000068"),
        ("0.00005", "0.000000000005", 1, "false", "0.000100"),
    ]
    text = "c1,c2,c3,c4,c5\n" + "".join("%s,%s,%d,%s,%s\n" % r for r in rows)
    write_text(os.path.join(CORE, "decimal_data.csv"), text)


def _aggregate_test_100_rows():
    text = read_text(os.path.join(TESTING_CSV, "aggregate_test_100.csv"))
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines[0], lines[1:]


def gen_aggregate_test_100_order_by_c1_asc():
    # Stable sort of aggregate_test_100.csv by c1, with a final newline. This
    # reproduces upstream's file (checked: same length, same row order).
    header, rows = _aggregate_test_100_rows()
    rows = sorted(rows, key=lambda r: r.split(",", 1)[0])
    write_text(os.path.join(CORE, "aggregate_test_100_order_by_c1_asc.csv"),
               header + "\n" + "\n".join(rows) + "\n")


def gen_aggregate_test_100_with_dates():
    # aggregate.slt / window_topk_pushdown.slt: aggregate_test_100.csv plus
    # c14 DATE and c15 TIMESTAMP. The only expectations on the new columns:
    # approx_distinct(c14) = 18, approx_distinct(c15) = 60, and 60 distinct
    # values of c15 cast to Date64, Time32(Second) and Time64(Nanosecond).
    # Upstream's actual dates are unknown; these are synthetic.
    header, rows = _aggregate_test_100_rows()
    base = datetime.datetime(2023, 1, 1)
    out = [header + ",c14,c15"]
    for i, r in enumerate(rows):
        d = (base + datetime.timedelta(days=(i * 7) % 18 * 11)).date()
        k = (i * 13) % 60
        # step of 26017 s is coprime with 86400, so times of day stay distinct
        ts = base + datetime.timedelta(days=k * 3, seconds=(k * 26017) % 86400)
        out.append("%s,%s,%s" % (r, d.isoformat(), ts.strftime("%Y-%m-%dT%H:%M:%S")))
    assert len({o.rsplit(",", 2)[1] for o in out[1:]}) == 18
    assert len({o.rsplit(",", 1)[1] for o in out[1:]}) == 60
    assert len({o.rsplit(",", 1)[1][11:] for o in out[1:]}) == 60
    write_text(os.path.join(TESTING_CSV, "aggregate_test_100_with_dates.csv"), "\n".join(out) + "\n")


# ---------------------------------------------------------------------------
# Arrow IPC / Parquet files (pyarrow)
# ---------------------------------------------------------------------------


def _pa():
    import pyarrow as pa
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq
    return pa, ipc, pq


def gen_partitioned_arrow():
    # arrow_files.slt / dynamic_file.slt: f0 Int64, f1 Utf8, f2 Boolean;
    # part=123: (1, foo, true), (2, bar, false); part=456: (3, baz, true), (4, NULL, NULL).
    pa, ipc, _ = _pa()
    schema = pa.schema([("f0", pa.int64()), ("f1", pa.string()), ("f2", pa.bool_())])
    parts = {
        "123": pa.table({"f0": [1, 2], "f1": ["foo", "bar"], "f2": [True, False]}, schema=schema),
        "456": pa.table({"f0": [3, 4], "f1": ["baz", None], "f2": [True, None]}, schema=schema),
    }
    for part, table in parts.items():
        for folder, new in (("partitioned_table_arrow", ipc.new_file),
                            ("partitioned_table_arrow_stream", ipc.new_stream)):
            path = os.path.join(CORE, folder, "part=" + part, "data.arrow")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with new(path, schema) as w:
                w.write_table(table)
            print("wrote", os.path.relpath(path, HERE))


def _write_parquet(table, path, **kw):
    _, _, pq = _pa()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(table, path, **kw)
    print("wrote", os.path.relpath(path, HERE))


def gen_test_statistics_per_partition():
    # push_down_filter_regression.slt (and upstream's partition_statistics.rs):
    # four single-row files with an Int32 column `id`:
    # date=2025-03-01 -> 4, 03-02 -> 3, 03-03 -> 2, 03-04 -> 1.
    pa, _, _ = _pa()
    for day, id_ in (("01", 4), ("02", 3), ("03", 2), ("04", 1)):
        t = pa.table({"id": pa.array([id_], pa.int32())})
        _write_parquet(t, os.path.join(CORE, "test_statistics_per_partition",
                                       "date=2025-03-" + day, "j5fUeSDQo22oPyPU.parquet"))


def gen_fixed_size_list_array():
    # array/array_cast.slt: f0 FixedSizeList(2 x Int64) = [1, 2], [3, 4].
    pa, _, _ = _pa()
    # Legacy list naming keeps the element field named "item", so DataFusion
    # shows FixedSizeList(2 x Int64) as the test expects.
    t = pa.table({"f0": pa.array([[1, 2], [3, 4]], type=pa.list_(pa.int64(), 2))})
    _write_parquet(t, os.path.join(CORE, "fixed_size_list_array.parquet"),
                   use_compliant_nested_type=False)


def gen_test_binary():
    # parquet.slt: `ids` FixedSizeBinary(16), 466 non-null values; the 10
    # smallest (ORDER BY ids LIMIT 10) are given, and the first 3 rows of the
    # file are the 3 smallest. The other 456 values are synthetic.
    pa, _, _ = _pa()
    smallest = [
        "008c7196f68089ab692e4739c5fd16b5", "00a51a7bc5ff8eb1627f8f3dc959dce8",
        "0166ce1d46129ad104fa4990c6057c91", "03a4893f3285b422820b4cd74c9b9786",
        "04999ac861e14682cd339eae2cc74359", "04b86bf8f228739fde391f850636a77d",
        "050fb9cf722a709eb94b70b3ee7dc342", "052578a65e8e91b8526b182d40e846e8",
        "05408e6a403e4296526006e20cc4a45a", "0592e6fb7d7169b888a4029b53abb701",
    ]
    rng = random.Random(466)
    others = set()
    while len(others) < 456:
        h = "%032x" % rng.getrandbits(128)
        if h > smallest[-1]:
            others.add(h)
    values = sorted(bytes.fromhex(h) for h in smallest + sorted(others))
    t = pa.table({"ids": pa.array(values, pa.binary(16))})
    _write_parquet(t, os.path.join(CORE, "test_binary.parquet"))


def gen_timestamp_with_tz():
    # parquet.slt: 131072 rows; `timestamp` is Timestamp(ms, "UTC") with
    # minimum 2014-08-27T14:00:00Z; a `count` column. Values are synthetic.
    pa, _, _ = _pa()
    n = 131072
    start = int(datetime.datetime(2014, 8, 27, 14, tzinfo=datetime.timezone.utc).timestamp() * 1000)
    t = pa.table({
        "count": pa.array([i % 1000 for i in range(n)], pa.int64()),
        "timestamp": pa.array([start + i * 1000 for i in range(n)], pa.timestamp("ms", tz="UTC")),
    })
    _write_parquet(t, os.path.join(CORE, "timestamp_with_tz.parquet"),
                   use_dictionary=False,
                   column_encoding={"count": "DELTA_BINARY_PACKED", "timestamp": "DELTA_BINARY_PACKED"},
                   compression="snappy")


def gen_parquet_map():
    # map.slt: 209 rows; ints Map(Utf8 -> Int64) {bytes: N}, strings
    # Map(Utf8 -> Utf8) with keys host, method, protocol, referer, request,
    # status, user-identifier; timestamp Utf8; all non-null.
    # Expectations met: the 10 rows with the largest `bytes` (exact), COUNT 209,
    # SUM(bytes) 5636785, SUM(bytes) for GET 649668, rows per method
    # (POST 41, HEAD 33, PATCH 30, OPTION 29, GET 27, PUT 25, DELETE 24), and
    # 209 distinct (ints, strings). The other 199 rows are synthetic.
    pa, _, _ = _pa()
    keys = ["host", "method", "protocol", "referer", "request", "status", "user-identifier"]
    top = [
        (49960, "21.169.210.169", "GET", "HTTP/1.1", "https://up.de/booper/bopper/mooper/mopper", "/user/booperbot124", "500", "shaneIxD", "06/Oct/2023:17:53:58"),
        (49689, "244.231.56.81", "PATCH", "HTTP/2.0", "https://names.de/this/endpoint/prints/money", "/controller/setup", "500", "ahmadajmi", "06/Oct/2023:17:53:54"),
        (48768, "127.152.34.105", "POST", "HTTP/1.1", "https://for.com/secret-info/open-sesame", "/secret-info/open-sesame", "200", "Karimmove", "06/Oct/2023:17:53:59"),
        (48574, "121.67.176.60", "POST", "HTTP/2.0", "https://names.com/this/endpoint/prints/money", "/apps/deploy", "401", "benefritz", "06/Oct/2023:17:54:02"),
        (48274, "39.37.198.203", "DELETE", "HTTP/1.0", "https://some.de/booper/bopper/mooper/mopper", "/secret-info/open-sesame", "550", "ahmadajmi", "06/Oct/2023:17:54:00"),
        (47775, "50.89.77.82", "OPTION", "HTTP/1.0", "https://random.com/observability/metrics/production", "/controller/setup", "200", "meln1ks", "06/Oct/2023:17:53:54"),
        (47557, "108.242.133.203", "OPTION", "HTTP/2.0", "https://we.org/observability/metrics/production", "/apps/deploy", "500", "meln1ks", "06/Oct/2023:17:53:48"),
        (47552, "206.248.141.240", "HEAD", "HTTP/1.1", "https://up.us/user/booperbot124", "/wp-admin", "400", "jesseddy", "06/Oct/2023:17:53:50"),
        (47342, "110.222.38.8", "HEAD", "HTTP/2.0", "https://we.com/controller/setup", "/do-not-access/needs-work", "301", "ahmadajmi", "06/Oct/2023:17:53:59"),
        (47238, "241.134.69.76", "POST", "HTTP/2.0", "https://up.de/do-not-access/needs-work", "/controller/setup", "503", "ahmadajmi", "06/Oct/2023:17:53:58"),
    ]
    method_total = {"POST": 41, "HEAD": 33, "PATCH": 30, "OPTION": 29, "GET": 27, "PUT": 25, "DELETE": 24}
    total_sum, get_sum = 5636785, 649668
    remaining = dict(method_total)
    for r in top:
        remaining[r[2]] -= 1
    rng = random.Random(209)
    methods = [m for m, c in sorted(remaining.items()) for _ in range(c)]
    rng.shuffle(methods)
    n = len(methods)  # 199

    # bytes for the synthetic rows: distinct, below the 10th largest (47238),
    # GET rows summing to get_sum - 49960, all rows to total_sum - sum(top).
    def pick(count, target, used):
        while True:
            vals = [rng.randint(100, 46000) for _ in range(count)]
            diff = target - sum(vals)
            # spread the difference, keeping values in range
            i = 0
            while diff != 0 and i < 100000:
                j = i % count
                step = max(-diff, -(vals[j] - 100)) if diff < 0 else min(diff, 46000 - vals[j])
                step = max(min(step, 997), -997)
                vals[j] += step
                diff -= step
                i += 1
            if diff == 0 and len(set(vals)) == count and not (set(vals) & used):
                return vals

    get_idx = [i for i, m in enumerate(methods) if m == "GET"]
    other_idx = [i for i, m in enumerate(methods) if m != "GET"]
    get_vals = pick(len(get_idx), get_sum - 49960, set())
    other_vals = pick(len(other_idx), total_sum - sum(r[0] for r in top) - (get_sum - 49960), set(get_vals))
    byte_vals = [0] * n
    for i, v in zip(get_idx, get_vals):
        byte_vals[i] = v
    for i, v in zip(other_idx, other_vals):
        byte_vals[i] = v

    tlds = ["de", "com", "org", "us"]
    words = ["up", "names", "for", "some", "random", "we"]
    paths = ["/booper/bopper/mooper/mopper", "/this/endpoint/prints/money", "/secret-info/open-sesame",
             "/observability/metrics/production", "/user/booperbot124", "/controller/setup",
             "/do-not-access/needs-work", "/apps/deploy", "/wp-admin"]
    users = ["shaneIxD", "ahmadajmi", "Karimmove", "benefritz", "meln1ks", "jesseddy", "devankoshal",
             "Thewallacem", "b0rnc0nfused"]
    statuses = ["200", "301", "400", "401", "403", "404", "500", "503", "550"]
    rows = []
    hosts = set(r[1] for r in top)
    for i in range(n):
        while True:
            host = "%d.%d.%d.%d" % tuple(rng.randint(1, 254) for _ in range(4))
            if host not in hosts:
                hosts.add(host)
                break
        rows.append((byte_vals[i], host, methods[i], rng.choice(["HTTP/1.0", "HTTP/1.1", "HTTP/2.0"]),
                     "https://%s.%s%s" % (rng.choice(words), rng.choice(tlds), rng.choice(paths)),
                     rng.choice(paths), rng.choice(statuses), rng.choice(users),
                     "06/Oct/2023:17:%02d:%02d" % (53 + (i % 2), rng.randint(0, 59))))
    # interleave the top rows among the synthetic ones (deterministically)
    for k, r in enumerate(top):
        rows.insert(k * 20 + 7, r)
    assert len(rows) == 209
    assert sum(r[0] for r in rows) == total_sum
    assert sum(r[0] for r in rows if r[2] == "GET") == get_sum
    assert sorted((r[0] for r in rows), reverse=True)[:10] == [r[0] for r in top]

    int_map = pa.map_(pa.string(), pa.field("value", pa.int64(), nullable=False))
    str_map = pa.map_(pa.string(), pa.field("value", pa.string(), nullable=False))
    schema = pa.schema([
        pa.field("ints", int_map, nullable=False),
        pa.field("strings", str_map, nullable=False),
        pa.field("timestamp", pa.string(), nullable=False),
    ])
    t = pa.table({
        "ints": pa.array([[("bytes", r[0])] for r in rows], int_map),
        "strings": pa.array([list(zip(keys, r[1:8])) for r in rows], str_map),
        "timestamp": pa.array([r[8] for r in rows], pa.string()),
    }, schema=schema)
    path = os.path.join(CORE, "parquet_map.parquet")
    _write_parquet(t, path)
    # DataFusion names the map's entries field after the Parquet group, which
    # pyarrow calls "key_value"; map.slt expects "entries" (as arrow-rs writes
    # it). Rename the group in the Thrift footer: every occurrence there is a
    # compact-protocol string (length byte 9, then "key_value").
    _rename_in_footer(path, b"\x09key_value", b"\x07entries")


def _rename_in_footer(path, old, new):
    data = open(path, "rb").read()
    assert data[-4:] == b"PAR1"
    flen = struct.unpack("<I", data[-8:-4])[0]
    body, footer = data[:-8 - flen], data[-8 - flen:-8]
    assert footer.count(old) >= 3
    footer = footer.replace(old, new)
    with open(path, "wb") as f:
        f.write(body + footer + struct.pack("<I", len(footer)) + b"PAR1")


def _int96(days_since_epoch, nanos_of_day):
    return struct.pack("<qi", nanos_of_day, days_since_epoch + 2440588)


def _days_from_civil(y, m, d):
    y -= m <= 2
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def gen_int96_from_spark():
    # parquet.slt: one nullable INT96 column `a` with the six values that
    # parquet-testing's int96_from_spark.md documents (UTC instants):
    #   2024-01-01T20:34:56.123456, 2024-01-01T01:00:00, 9999-12-31T03:00:00,
    #   2024-12-30T23:00:00, NULL, 290000-12-30T23:00:00
    # Read as nanoseconds the two large ones wrap to 1816-03-29T08:56:08.066277376
    # and 1815-11-08T16:01:01.191053312, as parquet.slt expects.
    # pyarrow cannot hold the large instants, so the file is written with
    # placeholder timestamps and the 12-byte INT96 values are patched in place
    # (PLAIN encoding, no compression, no statistics, no page checksums).
    pa, _, pq = _pa()
    H = 3600 * 10**9
    targets = [
        _int96(_days_from_civil(2024, 1, 1), 20 * H + (34 * 60 + 56) * 10**9 + 123456000),
        _int96(_days_from_civil(2024, 1, 1), 1 * H),
        _int96(_days_from_civil(9999, 12, 31), 3 * H),
        _int96(_days_from_civil(2024, 12, 30), 23 * H),
        # The last one is stored as upstream's file evidently stores it: the
        # instant's microseconds (9089380393200000000) minus 2**64, split with
        # truncating division into a negative Julian day and negative nanos.
        # Only this encoding gives both expectations: 1815-11-08T16:01:01.191053312
        # when read as ns, and "Failed to convert -9357363680509551" when read as ms.
        struct.pack("<qi", -32509551616000, -105862232),
    ]
    placeholders_ns = [(1000 + k) * 86400 * 10**9 + (k + 1) * 10**9 for k in range(5)]
    placeholders = [_int96(1000 + k, (k + 1) * 10**9) for k in range(5)]
    vals = placeholders_ns[:4] + [None] + placeholders_ns[4:]
    t = pa.table({"a": pa.array(vals, pa.timestamp("ns"))})
    path = os.path.join(PARQUET_TESTING, "int96_from_spark.parquet")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(t, path, use_deprecated_int96_timestamps=True, compression="none",
                   use_dictionary=False, write_statistics=False, store_schema=False,
                   data_page_version="1.0")
    data = bytearray(open(path, "rb").read())
    for ph, tg in zip(placeholders, targets):
        assert data.count(ph) == 1, "placeholder not found exactly once"
        i = data.index(ph)
        data[i:i + 12] = tg
    with open(path, "wb") as f:
        f.write(bytes(data))
    print("wrote", os.path.relpath(path, HERE))


TEXT = [gen_aggregate_simple, gen_timestamps, gen_json, gen_small_csvs, gen_decimal_data,
        gen_aggregate_test_100_order_by_c1_asc, gen_aggregate_test_100_with_dates]
BINARY = [gen_partitioned_arrow, gen_test_statistics_per_partition, gen_fixed_size_list_array,
          gen_test_binary, gen_timestamp_with_tz, gen_parquet_map, gen_int96_from_spark]

if __name__ == "__main__":
    for fn in TEXT:
        fn()
    if "--text" not in sys.argv:
        for fn in BINARY:
            fn()
