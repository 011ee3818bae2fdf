"""Connection and connect(): a session on the process's shared engine (pyexasol's shape)."""

from __future__ import annotations

import inspect
import os
import re
import sys
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence, Tuple, Union

import pyarrow as pa

from ._accelsql import AccelsqlError, NativeConnection
from . import _dbapi
from ._dbapi import Cursor, interface_error, translated
from ._remote import RemoteNative, is_remote
from ._statement import Statement
from ._text import NAME as _NAME
from ._text import bind as _bind

if TYPE_CHECKING:
    import pandas

#: A UDF parameter or result type: a SQL type name ('DOUBLE', 'VARCHAR(100)', 'DECIMAL(18,2)',
#: 'BIGINT', 'BOOLEAN', 'DATE', 'TIMESTAMP') or a pyarrow DataType.
TypeSpec = Union[str, pa.DataType]

_IDENTIFIER = re.compile(r'^\s*("[^"]+"|[A-Za-z_][A-Za-z0-9_]*)(\.("[^"]+"|[A-Za-z_][A-Za-z0-9_]*))*\s*$')

#: ``connect(script_python=...)``'s default: the interpreter running this program.
CURRENT_INTERPRETER = "current"


class Connection:
    """One connection: its own session (settings, tables, registered callables) on the engine
    this process shares between all connections with the same ``simulated_gpus`` and
    ``data_dir`` (its GPUs, lease queue and scripts).

    Use :func:`connect`. A connection is a context manager (closed on exit) and may be used from
    several threads; a statement releases the GIL while it runs.
    """

    def __init__(
        self,
        simulated_gpus: Optional[Union[int, str]] = None,
        data_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
        *,
        script_python: Optional[str] = CURRENT_INTERPRETER,
        schema: Optional[str] = None,
        lower_ident: bool = False,
        restricted: bool = False,
        user: Optional[str] = None,
        password: Optional[str] = None,
        dialect: Optional[str] = None,
        autocommit: bool = True,
        **settings: Any,
    ) -> None:
        """See :func:`connect`."""
        self._autocommit = True
        self._native: Any
        default_python = script_python == CURRENT_INTERPRETER
        if is_remote(simulated_gpus):
            if data_dir is not None:
                raise ValueError("data_dir is the server's (accelsql serve --data-dir), not a client's")
            self._native = RemoteNative(str(simulated_gpus), user, password)
            # The server's machine runs the scripts: its python3 unless asked otherwise.
            if script_python == CURRENT_INTERPRETER:
                script_python = None
        else:
            if password is not None:
                raise ValueError(
                    "password is for a server: connect('grpc://host:port', ...); in process, "
                    "user= alone picks the catalog user"
                )
            self._native = NativeConnection(
                simulated_gpus, os.fspath(data_dir) if data_dir is not None else None, user
            )
        if script_python == CURRENT_INTERPRETER:
            script_python = sys.executable or None
        if script_python:
            if not os.path.isabs(script_python) or re.search(r"[\s']", script_python):
                raise ValueError(
                    f"script_python must be an absolute path without spaces or quotes: {script_python!r}"
                )
            try:
                self.execute(f"ALTER SESSION SET SCRIPT_LANGUAGES = 'PYTHON3={script_python}'")
            except AccelsqlError as e:
                # A catalog user without CREATE SCRIPT may not name interpreters: the default
                # one is then left to the engine; one asked for by name is an error.
                if not (default_python and user is not None and e.code == "42501"):
                    raise
        self.set("identifier_case", "lower" if lower_ident else "upper")
        if dialect is not None:
            self.set("sql_dialect", dialect)
        for name, value in settings.items():
            self.set(name, value)
        if schema:
            name = schema if _NAME.match(schema) else _quoted_identifier(schema)
            # The schema is made when it is new (in Exasol it must exist); CREATE SCHEMA opens
            # it, as in Exasol.
            self.execute(f"CREATE SCHEMA IF NOT EXISTS {name}")
            self.execute(f"OPEN SCHEMA {name}")
        if not autocommit:
            self.set_autocommit(False)
        if restricted:
            # Last: the set-up above is the host program's, what follows is the untrusted SQL's.
            self._native.restrict()

    # -- SQL -------------------------------------------------------------------------------------

    def execute(
        self, sql: str, params: Optional[Union[Sequence[Any], Mapping[str, Any]]] = None
    ) -> Statement:
        """Runs ``sql`` (one or more ``;``-separated statements, script DDL included) and returns
        the last statement's result. Raises :class:`AccelsqlError` with the engine's code; a
        failed statement leaves the connection usable. Ctrl-C cancels the statement (its GPU lease
        is released) and raises KeyboardInterrupt.

        ``params`` binds values to the last statement's placeholders, by the engine (values are
        never pasted into the text): a sequence for ``?`` placeholders, or a mapping for
        pyexasol's ``{name}`` ones (``{name!d}`` / ``{name!f}``: a number; ``{name!i}`` /
        ``{name!q}``: an identifier, checked / quoted; ``{{`` and ``}}``: braces).
        """
        if params is None:
            return self._run(sql, None)
        sql, values = _bind(sql, params)
        return self._run(sql, values)

    def _run(self, sql: str, values: Optional[Sequence[Any]]) -> Statement:
        """Runs ``sql`` with ``values`` for its ``$1``, ``$2``, … placeholders; an engine error
        is raised as its PEP 249 class (an :class:`AccelsqlError` too)."""
        try:
            if values is None:
                table, dml = self._native.query(sql)
            else:
                arrays = [pa.array([v]) for v in values]
                batch = pa.RecordBatch.from_arrays(arrays, names=[f"${i + 1}" for i in range(len(values))])
                table, dml = self._native.query(sql, batch)
        except AccelsqlError as e:
            raise translated(e) from None
        return Statement(table, dml=dml)

    # -- DB-API 2.0 (PEP 249) --------------------------------------------------------------------

    def cursor(self) -> Cursor:
        """A new PEP 249 :class:`~accelsql.Cursor` on this connection's session."""
        if self.closed:
            raise interface_error("the connection is closed", "08003")
        return Cursor(self)

    def commit(self) -> None:
        """``COMMIT``: the writes this connection made since its transaction began become
        every session's (with autocommit on, each statement has committed already and this
        does nothing). Raises :class:`OperationalError` 40001 when another session's commit
        conflicts with them; nothing of the transaction is then kept."""
        if self.closed:
            raise interface_error("the connection is closed", "08003")
        self.execute("COMMIT")

    def rollback(self) -> None:
        """``ROLLBACK``: forgets the writes this connection made since its transaction began
        (with autocommit on there are none)."""
        if self.closed:
            raise interface_error("the connection is closed", "08003")
        self.execute("ROLLBACK")

    @property
    def autocommit(self) -> bool:
        """Whether each statement commits when it ends (the default, as in pyexasol); set it to
        False to make writes wait for :meth:`commit` (``SET AUTOCOMMIT OFF``)."""
        return self._autocommit

    @autocommit.setter
    def autocommit(self, value: bool) -> None:
        self.set_autocommit(value)

    def set_autocommit(self, value: bool) -> None:
        """pyexasol's ``set_autocommit``: True commits what waits and makes each statement
        commit when it ends; False makes writes wait for :meth:`commit` or :meth:`rollback`."""
        if self.closed:
            raise interface_error("the connection is closed", "08003")
        self.execute(f"SET AUTOCOMMIT {'ON' if value else 'OFF'}")
        self._autocommit = bool(value)

    def cancel(self) -> None:
        """Cancels the statement this connection is running now (call it from another thread):
        it fails with 57014 (:class:`OperationalError`) and releases its GPU lease."""
        self._native.cancel()

    def set(self, name: str, value: Any) -> None:
        """``SET name = 'value'`` for this connection; a name without a dot is an accelsql
        setting (``set('gpu_wait_timeout', '30s')`` is ``SET accelsql.gpu_wait_timeout = '30s'``).
        """
        if "." not in name:
            name = f"accelsql.{name}"
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", name):
            raise ValueError(f"not a setting name: {name!r}")
        if isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = str(value)
        self.execute(f"SET {name} = '{_quote(text)}'")

    # -- pandas and Arrow ------------------------------------------------------------------------

    def export_to_arrow(self, query_or_table: str) -> pa.Table:
        """The result of a query (or every row of a table, given its name) as a pyarrow Table,
        handed over through the Arrow C stream interface (no copy of the data)."""
        return self._run(_as_query(query_or_table), None).to_arrow()

    def export_to_pandas(self, query_or_table: str, **to_pandas: Any) -> "pandas.DataFrame":
        """The result of a query (or every row of a table, given its name) as a pandas DataFrame:
        ``export_to_arrow(...).to_pandas(**to_pandas)``. NULLs become None/NaN/NaT as pyarrow
        converts them (an integer column with NULLs becomes float64)."""
        return self.export_to_arrow(query_or_table).to_pandas(**to_pandas)

    def import_from_arrow(self, data: Any, table: Union[str, Tuple[str, str]]) -> int:
        """Loads a pyarrow Table or RecordBatchReader (anything with ``__arrow_c_stream__``) into
        ``table`` of this connection: created (in memory) when the name is free, else appended to
        (columns by position, cast to the table's types). Returns the number of rows loaded.

        Unquoted names fold to lower case, as in SQL; column names are kept as given.
        """
        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        try:
            return self._native.import_arrow(data, _table_name(table))
        except AccelsqlError as e:
            raise translated(e) from None

    def import_from_pandas(self, df: "pandas.DataFrame", table: Union[str, Tuple[str, str]]) -> int:
        """Loads a pandas DataFrame into ``table`` (see :meth:`import_from_arrow`); the index is
        not loaded. NaN/None/NaT become NULL. Returns the number of rows loaded."""
        return self.import_from_arrow(pa.Table.from_pandas(df, preserve_index=False), table)

    # -- Python callables as UDFs ----------------------------------------------------------------

    def register_udf(
        self,
        fn: Callable[..., Any],
        *,
        name: Optional[str] = None,
        inputs: Sequence[TypeSpec] = (),
        returns: TypeSpec,
        accelerator: str = "None",
        vectorized: bool = True,
        instance_limit: Optional[int] = None,
    ) -> None:
        """Registers ``fn`` as the scalar UDF ``name`` (default: ``fn.__name__``) of this connection.

        - ``inputs``/``returns``: SQL type names ('DOUBLE', 'VARCHAR(100)', 'DECIMAL(18,2)', ...)
          or pyarrow types. Arguments of other types are cast to ``inputs`` where Arrow can.
        - ``vectorized=True``: ``fn`` gets one pyarrow Array per argument (a batch of rows) and
          returns one value per row: a pyarrow Array or ChunkedArray, a numpy array, a list...
          ``vectorized=False``: ``fn`` is called once per row with Python values (None for NULL).
        - ``accelerator``: ``%perInstanceRequiredAcceleratorDevices``: 'None', 'GpuNvidia'
          (required) or 'GpuNvidia|None' (optional). The placement rule applies exactly as for
          scripts: at most one call per query block gets the GPUs, a second required call fails
          with 22069, a GPU statement waits for the node lease.
        - ``instance_limit``: ``%perNodeAndCallInstanceLimit``.
        - If ``fn`` has a ``ctx`` parameter it gets ``ctx=UdfContext``: the instance and the device
          it is pinned to. Unlike a script's worker process, an in-process callable cannot be
          restricted to that device (no ``CUDA_VISIBLE_DEVICES``): use ``ctx.device_index`` /
          ``ctx.device_uuid`` to pick it (e.g. ``cupy.cuda.Device(ctx.device_index)``).

        A result of the wrong length or type fails the statement with 22E02; an exception in
        ``fn`` with 22U10 and its traceback. Registering a name again replaces this connection's
        earlier callable.
        """
        if name is None:
            name = getattr(fn, "__name__", None)
            if not name:
                raise ValueError("register_udf: give the UDF a name= (the callable has no __name__)")
        self._native.register_udf(
            fn,
            name,
            list(inputs),
            returns,
            accelerator,
            bool(vectorized),
            instance_limit,
            _takes_ctx(fn),
        )

    # -- lifetime ---------------------------------------------------------------------------------

    @property
    def gpu_count(self) -> int:
        """GPUs of this connection's engine (simulated or real)."""
        return self._native.gpu_count

    def close(self) -> None:
        """Ends the session: its tables and registered callables go with it. Closing twice is fine."""
        self._native.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._native.closed

    @property
    def restricted(self) -> bool:
        """Whether the connection refuses what untrusted SQL may not do (``connect(restricted=True)``)."""
        return self._native.restricted

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"gpus={self.gpu_count}"
        return f"<accelsql.Connection {state}>"


# PEP 249's optional extension: the exception classes as attributes of a connection.
for _exception in (
    _dbapi.Warning,
    _dbapi.Error,
    _dbapi.InterfaceError,
    _dbapi.DatabaseError,
    _dbapi.DataError,
    _dbapi.OperationalError,
    _dbapi.IntegrityError,
    _dbapi.InternalError,
    _dbapi.ProgrammingError,
    _dbapi.NotSupportedError,
):
    setattr(Connection, _exception.__name__, _exception)


def connect(
    simulated_gpus: Optional[Union[int, str]] = None,
    data_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
    *,
    script_python: Optional[str] = CURRENT_INTERPRETER,
    schema: Optional[str] = None,
    lower_ident: bool = False,
    restricted: bool = False,
    user: Optional[str] = None,
    password: Optional[str] = None,
    dialect: Optional[str] = None,
    autocommit: bool = True,
    **settings: Any,
) -> Connection:
    """Opens a connection to this process's engine, or to a server.

    ``connect("grpc://host:port", user=..., password=...)`` connects to an ``accelsql serve``
    over Arrow Flight SQL (``grpc+tls://`` with TLS; needs ``pip install 'accelsql[server]'``):
    the same :class:`Connection` API, run by the server's engine, whose GPUs and lease queue
    every client shares. ``user``/``password``: a user of the server's users file; without one
    the server's token (its ``token:`` line, or ``DATA_DIR/server-token``) is the password, with
    any user name (or none); a server started with ``--no-auth`` needs neither.
    ``data_dir`` is then the server's; ``script_python`` defaults to the server's ``python3``;
    ``register_udf`` and ``restricted=True`` are in-process only (the server decides
    restrictions: ``--restricted``).

    In process, ``user`` picks a catalog user (``CREATE USER``, ``accelsql users import``) of the
    engine, no password asked: the connection has that user's privileges (``CURRENT_USER`` is
    its name; found as written, else upper case) and raises :class:`AccelsqlError` 42704 when
    there is no such user, 42501 when it lacks ``CREATE SESSION``. None (the default): the
    engine's own user SYS, with every privilege. The default ``script_python`` is not set for a
    user without ``CREATE SCRIPT`` (``python3`` on PATH then).

    - ``simulated_gpus``: use that many simulated GPUs (leases, placement and device pinning
      behave as on real ones); None: the devices NVML finds (or ``ACCELSQL_SIMULATED_GPUS``),
      limited by ``CUDA_VISIBLE_DEVICES``.
    - ``data_dir``: where tables (Delta Lake tables under ``DATA_DIR/tables``), scripts, users
      and connections persist; every connection to it shares them, and they are there after a
      restart. None: in memory, shared by this process's connections without a data directory.
    - ``script_python``: the interpreter that runs PYTHON3 scripts; by default the one running
      this program (so scripts see its packages); None: ``python3`` on PATH.
    - ``schema``: the schema to open, as pyexasol's ``schema=``: unqualified tables and scripts
      are created and found there. It is created when it is new (in Exasol it must exist).
    - ``lower_ident``: as pyexasol's. False (the default): result column names come as Exasol
      folds them, unquoted names upper case (``SELECT 1 AS a`` has column ``A``; ``AS "a"``
      keeps ``a``), the ``accelsql.identifier_case = 'upper'`` setting. True: lower case, as
      DataFusion names them. Either way, names in SQL text are found whatever their case.
    - ``restricted``: for SQL from untrusted users. After the set-up above, the connection
      refuses (error 42501) script DDL, ``ALTER SESSION SET SCRIPT_LANGUAGES``, CREATE/DROP
      CONNECTION, file access (files as tables, CREATE EXTERNAL TABLE, COPY … TO) and settings
      that could lift a resource limit; existing scripts can still be called. It cannot be lifted.
    - ``dialect``: the connection's SQL dialect (``accelsql.sql_dialect``): ``"datafusion"`` (the
      engine's default, e.g. ``accelsql serve --sql-dialect``) or ``"exasol"``, where unquoted
      names fold to upper case (``CREATE TABLE t(a INT)`` makes ``T`` with column ``A``;
      ``"a"`` is another name), ``''`` is NULL, decimal literals are exact up to 36 digits, and
      Exasol's implicit conversions and type names apply. None: the engine's default.
    - ``autocommit``: True (the default, as pyexasol's): each statement commits when it ends.
      False: writes wait for :meth:`Connection.commit` and vanish at :meth:`Connection.rollback`
      or when the connection closes; the connection reads its own uncommitted writes, others
      do not (``SET AUTOCOMMIT OFF``).
    - ``settings``: ``SET`` for this connection, e.g. ``gpu_wait_timeout='30s'`` (an accelsql
      setting) or ``**{'datafusion.execution.batch_size': 65536}``.

    Connections with the same ``simulated_gpus`` and ``data_dir`` share one engine.
    """
    return Connection(
        simulated_gpus,
        data_dir,
        script_python=script_python,
        schema=schema,
        lower_ident=lower_ident,
        restricted=restricted,
        user=user,
        password=password,
        dialect=dialect,
        autocommit=autocommit,
        **settings,
    )


def _quoted_identifier(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'




def _quote(text: str) -> str:
    return text.replace("'", "''")


def _as_query(query_or_table: str) -> str:
    """A bare (possibly qualified) table name becomes ``SELECT * FROM name``."""
    if _IDENTIFIER.match(query_or_table) and query_or_table.strip().upper() not in ("SHOW", "VALUES"):
        return f"SELECT * FROM {query_or_table.strip()}"
    return query_or_table


def _table_name(table: Union[str, Tuple[str, str]]) -> str:
    if isinstance(table, tuple):
        return ".".join(table)
    return table


def _takes_ctx(fn: Callable[..., Any]) -> bool:
    try:
        parameter = inspect.signature(fn).parameters.get("ctx")
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )
