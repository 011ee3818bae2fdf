"""The ADBC peer of the `server` suite: fetches a query's whole result from an `accelsql serve`
through ADBC's Flight SQL driver (DB-API, `fetch_arrow_table`), warm-up runs first, and prints
one JSON object: the timed runs in seconds, the rows fetched, the driver's version.

Usage: python adbc_fetch.py URL SETUP_SQL QUERY WARMUP RUNS [TOKEN]
"""

import json
import sys
import time

import adbc_driver_flightsql
import adbc_driver_flightsql.dbapi as flightsql


def main() -> None:
    url, setup, query, warmup, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    token = sys.argv[6] if len(sys.argv) > 6 else ""
    # The server's token is the password, with any user name.
    db_kwargs = {"username": "bench", "password": token} if token else {}
    with flightsql.connect(url, db_kwargs=db_kwargs, autocommit=True) as conn:
        cur = conn.cursor()
        cur.execute(setup)
        cur.fetchall()
        times = []
        rows = 0
        for i in range(warmup + runs):
            started = time.perf_counter()
            cur.execute(query)
            table = cur.fetch_arrow_table()
            took = time.perf_counter() - started
            rows = table.num_rows
            if i >= warmup:
                times.append(took)
        cur.close()
    print(json.dumps({"times": times, "rows": rows, "version": adbc_driver_flightsql.__version__}))


if __name__ == "__main__":
    main()
