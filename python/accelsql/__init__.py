"""accelsql: an embedded SQL engine whose UDFs run on NVIDIA GPUs under Exasol's accelerator rules.

The engine runs in this process; the API has pyexasol's shape, plus DB-API habits::

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
Errors are :class:`AccelsqlError` with the engine's ``code``.
"""

from ._accelsql import AccelsqlError, UdfContext
from ._accelsql import __version__ as __version__
from ._connection import Connection, connect
from ._statement import Statement

__all__ = [
    "AccelsqlError",
    "Connection",
    "Statement",
    "UdfContext",
    "connect",
]
