"""The wire's anchor in the `server` suite: a plain Arrow Flight DoGet of the wide table, served
and read by pyarrow's C++ Flight (server and client in this process, over loopback, as the suite's
arrow-rs client and accelsql's server share one). The table has the suite's memory table's
columns and values (BIGINT a, BIGINT b, DOUBLE c, BIGINT d) in batches of BATCH_ROWS rows, as
accelsql's memory table holds them. Warm-up runs first; prints one JSON object: the timed runs in
seconds, the rows fetched, pyarrow's version.

Usage: python pyarrow_flight.py ROWS BATCH_ROWS WARMUP RUNS
"""

import json
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight


class TableServer(flight.FlightServerBase):
    """Serves one table for any ticket."""

    def __init__(self, table: pa.Table) -> None:
        super().__init__("grpc://127.0.0.1:0")
        self._table = table

    def do_get(self, context, ticket):  # noqa: ARG002 - Flight's signature
        return flight.RecordBatchStream(self._table)


def wide_table(rows: int, batch_rows: int) -> pa.Table:
    """`value AS a, value * 2 AS b, CAST(value AS DOUBLE) / 3 AS c, value % 97 AS d` over 1..=rows."""
    value = np.arange(1, rows + 1, dtype=np.int64)
    table = pa.table(
        {
            "a": value,
            "b": value * 2,
            "c": value.astype(np.float64) / 3,
            "d": value % 97,
        }
    )
    return pa.Table.from_batches(table.to_batches(max_chunksize=batch_rows))


def main() -> None:
    rows, batch_rows, warmup, runs = (int(a) for a in sys.argv[1:5])
    server = TableServer(wide_table(rows, batch_rows))
    try:
        client = flight.connect(f"grpc://127.0.0.1:{server.port}")
        times = []
        fetched = 0
        for i in range(warmup + runs):
            started = time.perf_counter()
            table = client.do_get(flight.Ticket(b"wide")).read_all()
            took = time.perf_counter() - started
            fetched = table.num_rows
            if i >= warmup:
                times.append(took)
        client.close()
    finally:
        server.shutdown()
    print(json.dumps({"times": times, "rows": fetched, "version": pa.__version__}))


if __name__ == "__main__":
    main()
