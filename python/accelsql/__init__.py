"""accelsql: an embedded SQL engine whose UDFs run on NVIDIA GPUs under Exasol's accelerator rules.

The engine runs in this process (or in ``accelsql serve``, with ``connect("grpc://…")``); the
API has pyexasol's shape, and PEP 249 (DB-API 2.0) through ``conn.cursor()``::

    import accelsql

    with accelsql.connect(simulated_gpus=2) as conn:
        conn.execute("CREATE TABLE t(x DOUBLE) AS VALUES (1.0), (2.0), (NULL)")
        print(conn.execute("SELECT x * 2 FROM t").fetchall())   # [(2.0,), (4.0,), (None,)]
        df = conn.export_to_pandas("SELECT * FROM t")            # pandas.DataFrame
        conn.register_udf(lambda x: pyarrow.compute.multiply(x, 10), name="times_ten",
                          inputs=["DOUBLE"], returns="DOUBLE", accelerator="GpuNvidia|None")

Connections of one process with the same ``simulated_gpus`` and ``data_dir`` share one engine:
its GPUs, its lease queue (GPU statements of all of them run one at a time, in arrival order)
and its scripts. Each connection has its own settings, tables and registered callables.
Errors are PEP 249's classes (:class:`ProgrammingError`, :class:`DataError`, … by the SQLSTATE's
class), each an :class:`AccelsqlError` with the engine's ``code``.
"""

from ._accelsql import AccelsqlError, UdfContext
from ._accelsql import __version__ as __version__
from ._connection import Connection, connect
from ._dbapi import (
    BINARY,
    DATETIME,
    NUMBER,
    ROWID,
    STRING,
    Binary,
    Cursor,
    DatabaseError,
    DataError,
    Date,
    DateFromTicks,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    Time,
    TimeFromTicks,
    Timestamp,
    TimestampFromTicks,
    Warning,
)
from ._statement import Statement

#: PEP 249: the DB-API level this module implements.
apilevel = "2.0"
#: PEP 249: 2 — threads may share the module and connections, not cursors. A connection runs one
#: statement at a time per calling thread (the GIL is released while it runs, and its session is
#: safe to use from several threads); a cursor holds one result and is one thread's.
threadsafety = 2
#: PEP 249: ``?`` placeholders; ``Cursor.execute`` also takes ``:1``/``$1`` with a sequence and
#: ``:name``/pyexasol's ``{name}`` with a mapping.
paramstyle = "qmark"

__all__ = [
    "AccelsqlError",
    "BINARY",
    "Binary",
    "Connection",
    "Cursor",
    "DATETIME",
    "DataError",
    "DatabaseError",
    "Date",
    "DateFromTicks",
    "Error",
    "IntegrityError",
    "InterfaceError",
    "InternalError",
    "NUMBER",
    "NotSupportedError",
    "OperationalError",
    "ProgrammingError",
    "ROWID",
    "STRING",
    "Statement",
    "Time",
    "TimeFromTicks",
    "Timestamp",
    "TimestampFromTicks",
    "UdfContext",
    "Warning",
    "apilevel",
    "connect",
    "paramstyle",
    "threadsafety",
]
