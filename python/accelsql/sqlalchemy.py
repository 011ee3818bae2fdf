"""The SQLAlchemy 2 dialect: ``accelsql://`` runs the engine in this process,
``accelsql+grpc://user:password@host:port`` speaks to an ``accelsql serve``.

::

    from sqlalchemy import create_engine, text
    engine = create_engine("accelsql://?simulated_gpus=2")        # data_dir=…, dialect=exasol, any setting
    remote = create_engine("accelsql+grpc://ann:secret@127.0.0.1:50051")   # ?tls=true for grpc+tls

    df.to_sql("t", engine, index=False)                            # pandas
    pandas.read_sql("SELECT * FROM t", engine)

An engine of this dialect keeps one DBAPI connection (SQLAlchemy's ``StaticPool``): every
``engine.connect()`` shares its session (an engine without a data directory keeps its tables
in memory, shared by this process's connections). SQLAlchemy's transactions are the engine's:
a transaction begins with ``BEGIN`` (``engine.begin()``, ``Session``), its writes are seen by
this connection only until ``commit`` and vanish at ``rollback`` (isolation level
``SERIALIZABLE``: snapshot reads, conflicting writes fail with 40001); with the
``AUTOCOMMIT`` isolation level each statement commits when it ends. Result names are
DataFusion's lower case (``lower_ident=True``), as SQLAlchemy expects of a database that folds
unquoted names to lower case. Reflection reads ``information_schema``: schemas, tables, views
and columns with their types; there are no primary keys, foreign keys or indexes to reflect.
Foreign keys and check constraints are left out of ``CREATE TABLE``, and ``CREATE INDEX`` does
nothing (the engine has none of them; nothing enforces them).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from sqlalchemy import exc, pool
from sqlalchemy import types as sqltypes
from sqlalchemy.engine import default, reflection
from sqlalchemy.sql import compiler

#: A script definition's head (`CREATE [OR REPLACE] <LANG> SCALAR|SET SCRIPT`).
_SCRIPT_HEAD = re.compile(r"^\s*CREATE\s+(OR\s+REPLACE\s+)?\w+\s+(SCALAR|SET)\s+SCRIPT\b", re.IGNORECASE)
#: The line holding only `/` that ends a script definition.
_SCRIPT_END = re.compile(r"^[ \t]*/[ \t]*;?[ \t]*$", re.MULTILINE)

#: Schemas of the engine itself, left out of reflection.
_SYSTEM_SCHEMAS = ("information_schema", "accelsql", "sys")


class AccelsqlTypeCompiler(compiler.GenericTypeCompiler):
    """SQLAlchemy types as accelsql (DataFusion) spells them."""

    def visit_DATETIME(self, type_: Any, **kw: Any) -> str:
        return "TIMESTAMP"

    def visit_TEXT(self, type_: Any, **kw: Any) -> str:
        return "VARCHAR"

    def visit_CLOB(self, type_: Any, **kw: Any) -> str:
        return "VARCHAR"

    def visit_FLOAT(self, type_: Any, **kw: Any) -> str:
        return "DOUBLE"

    def visit_REAL(self, type_: Any, **kw: Any) -> str:
        return "REAL"

    def visit_DOUBLE(self, type_: Any, **kw: Any) -> str:
        return "DOUBLE"

    def visit_DOUBLE_PRECISION(self, type_: Any, **kw: Any) -> str:
        return "DOUBLE"

    def visit_BLOB(self, type_: Any, **kw: Any) -> str:
        return "BYTEA"

    def visit_BINARY(self, type_: Any, **kw: Any) -> str:
        return "BYTEA"

    def visit_VARBINARY(self, type_: Any, **kw: Any) -> str:
        return "BYTEA"

    def visit_uuid(self, type_: Any, **kw: Any) -> str:
        return "VARCHAR"


class AccelsqlDDLCompiler(compiler.DDLCompiler):
    """DDL as accelsql takes it: the engine has no foreign keys or check constraints, so a
    table's ``ForeignKey``/``CheckConstraint`` are left out of its ``CREATE TABLE`` (SQLAlchemy
    still knows them; nothing enforces them) rather than failing it."""

    def visit_foreign_key_constraint(self, constraint: Any, **kw: Any) -> None:  # type: ignore[override]
        return None

    def visit_check_constraint(self, constraint: Any, **kw: Any) -> None:  # type: ignore[override]
        return None

    def visit_column_check_constraint(self, constraint: Any, **kw: Any) -> None:  # type: ignore[override]
        return None

    def visit_create_index(self, create: Any, **kw: Any) -> str:  # type: ignore[override]
        # No indexes in the engine: `Index(...)`/`index=True` create nothing (a statement that
        # does nothing, so that `create_all` goes on).
        return f"SELECT 1 AS no_index WHERE FALSE /* CREATE INDEX {create.element.name} */"

    def visit_drop_index(self, drop: Any, **kw: Any) -> str:  # type: ignore[override]
        return f"SELECT 1 AS no_index WHERE FALSE /* DROP INDEX {drop.element.name} */"


def column_type(data_type: str) -> sqltypes.TypeEngine:
    """The SQLAlchemy type of a column whose ``information_schema`` type is ``data_type``
    (DataFusion's Arrow type names: ``Int64``, ``Utf8View``, ``Decimal128(10, 2)``, …)."""
    t = data_type.strip()
    m = re.match(r"Decimal(?:32|64|128|256)\((\d+),\s*(-?\d+)\)", t)
    if m:
        return sqltypes.Numeric(int(m.group(1)), int(m.group(2)))
    simple = {
        "Int8": sqltypes.SmallInteger(),
        "Int16": sqltypes.SmallInteger(),
        "UInt8": sqltypes.SmallInteger(),
        "Int32": sqltypes.Integer(),
        "UInt16": sqltypes.Integer(),
        "Int64": sqltypes.BigInteger(),
        "UInt32": sqltypes.BigInteger(),
        "UInt64": sqltypes.Numeric(20, 0),
        "Float16": sqltypes.Float(),
        "Float32": sqltypes.REAL(),
        "Float64": sqltypes.Double(),
        "Boolean": sqltypes.Boolean(),
        "Utf8": sqltypes.String(),
        "LargeUtf8": sqltypes.String(),
        "Utf8View": sqltypes.String(),
        "Binary": sqltypes.LargeBinary(),
        "LargeBinary": sqltypes.LargeBinary(),
        "BinaryView": sqltypes.LargeBinary(),
        "Date32": sqltypes.Date(),
        "Date64": sqltypes.Date(),
        "Null": sqltypes.NullType(),
    }
    if t in simple:
        return simple[t]
    if t.startswith("Timestamp"):
        with_zone = not re.search(r"None\)$|^Timestamp\([a-zμ]+\)$", t)
        return sqltypes.TIMESTAMP(timezone=with_zone)
    if t.startswith("Time"):
        return sqltypes.Time()
    if t.startswith("Interval") or t.startswith("Duration"):
        return sqltypes.Interval()
    if t.startswith("Dictionary"):
        inner = t.rsplit(",", 1)[-1].rstrip(")")
        return column_type(inner)
    return sqltypes.NullType()


class AccelsqlDialect(default.DefaultDialect):
    """``accelsql://[?simulated_gpus=N&data_dir=DIR&dialect=exasol&setting=value…]``: the
    engine in this process (see the module docs)."""

    name = "accelsql"
    driver = "accelsql"
    supports_statement_cache = True
    supports_alter = False
    supports_comments = False
    supports_native_boolean = True
    supports_native_decimal = True
    supports_multivalues_insert = True
    supports_sane_rowcount = True
    supports_sane_multi_rowcount = True
    supports_default_values = False
    supports_default_metavalue = False
    supports_empty_insert = False
    supports_sequences = False
    supports_identity_columns = False
    postfetch_lastrowid = False
    insert_returning = False
    update_returning = False
    delete_returning = False
    default_paramstyle = "qmark"
    default_schema_name = "public"
    type_compiler_cls = AccelsqlTypeCompiler
    ddl_compiler = AccelsqlDDLCompiler
    requires_name_normalize = False

    @classmethod
    def import_dbapi(cls) -> Any:
        import accelsql

        return accelsql

    @classmethod
    def get_pool_class(cls, url: Any) -> Any:
        # A session's tables are its own: one connection, shared (see the module docs).
        return pool.StaticPool

    def create_connect_args(self, url: Any) -> Tuple[List[Any], Dict[str, Any]]:
        options = dict(url.query)
        kwargs: Dict[str, Any] = {"lower_ident": True}
        if "simulated_gpus" in options:
            kwargs["simulated_gpus"] = int(options.pop("simulated_gpus"))
        for key in ("data_dir", "dialect", "schema", "user"):
            if key in options:
                kwargs[key] = options.pop(key)
        kwargs.update(options)  # settings: SET accelsql.<name> (or a dotted name)
        return [], kwargs

    def do_execute(self, cursor: Any, statement: str, parameters: Any, context: Any = None) -> None:
        """Runs ``statement``; a script definition that a client split at its semicolons
        (JupySQL's ``%%sql`` splits cells with sqlparse, which cuts ``CREATE … SCRIPT`` at the
        ``;`` of ``%perInstanceRequiredAcceleratorDevices GpuNvidia;``) is joined back: its
        pieces are held until the one with the closing ``/`` line, and run as one statement."""
        connection = cursor.connection
        pending = getattr(connection, "_split_script", None)
        if pending is not None:
            statement = pending + "\n" + statement
        # A piece cut at a semicolon ends with it; a whole definition without its `/` line does not.
        cut = statement.rstrip().endswith(";")
        if cut and _SCRIPT_HEAD.match(statement) and not _SCRIPT_END.search(statement):
            connection._split_script = statement
            cursor._forget()
            return
        connection._split_script = None
        # The piece with the `/` line may go on into the next definition's first piece.
        ends = list(_SCRIPT_END.finditer(statement))
        tail = statement[ends[-1].end() :] if ends else ""
        if cut and ends and _SCRIPT_HEAD.match(tail):
            connection._split_script = tail.strip()
            statement = statement[: ends[-1].end()]
        cursor.execute(statement, parameters)

    # -- transactions: BEGIN … COMMIT / ROLLBACK (or AUTOCOMMIT) ------------------------------

    def do_begin(self, dbapi_connection: Any) -> None:
        if not getattr(dbapi_connection, "_sqla_autocommit", False):
            dbapi_connection.execute("BEGIN")

    def do_commit(self, dbapi_connection: Any) -> None:
        dbapi_connection.commit()

    def do_rollback(self, dbapi_connection: Any) -> None:
        dbapi_connection.rollback()

    def get_isolation_level(self, dbapi_connection: Any) -> str:
        return "AUTOCOMMIT" if getattr(dbapi_connection, "_sqla_autocommit", False) else "SERIALIZABLE"

    def get_default_isolation_level(self, dbapi_conn: Any) -> str:
        return "SERIALIZABLE"

    def get_isolation_level_values(self, dbapi_conn: Any) -> List[str]:
        return ["SERIALIZABLE", "AUTOCOMMIT"]

    def set_isolation_level(self, dbapi_connection: Any, level: str) -> None:
        if level not in ("SERIALIZABLE", "AUTOCOMMIT"):
            raise exc.ArgumentError(
                f"isolation level {level!r} is not available (SERIALIZABLE or AUTOCOMMIT)"
            )
        dbapi_connection._sqla_autocommit = level == "AUTOCOMMIT"

    def _get_server_version_info(self, connection: Any) -> Tuple[int, ...]:
        import accelsql

        return tuple(int(p) for p in re.findall(r"\d+", accelsql.__version__)[:3])

    def _get_default_schema_name(self, connection: Any) -> str:
        return "public"

    def do_ping(self, dbapi_connection: Any) -> bool:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("SELECT 1")
        finally:
            cursor.close()
        return True

    # -- reflection -------------------------------------------------------------------------

    def _rows(self, connection: Any, sql: str, params: Tuple[Any, ...] = ()) -> List[Tuple[Any, ...]]:
        return [tuple(r) for r in connection.exec_driver_sql(sql, params).fetchall()]

    @reflection.cache
    def get_schema_names(self, connection: Any, **kw: Any) -> List[str]:
        marks = ", ".join("?" for _ in _SYSTEM_SCHEMAS)
        rows = self._rows(
            connection,
            f"SELECT DISTINCT schema_name FROM information_schema.schemata WHERE schema_name NOT IN ({marks}) ORDER BY 1",
            _SYSTEM_SCHEMAS,
        )
        return [r[0] for r in rows]

    def _tables(self, connection: Any, schema: Optional[str], kind: str) -> List[str]:
        rows = self._rows(
            connection,
            "SELECT table_name FROM information_schema.tables WHERE table_schema = ? AND table_type = ? ORDER BY 1",
            (schema or self.default_schema_name, kind),
        )
        return [r[0] for r in rows]

    @reflection.cache
    def get_table_names(self, connection: Any, schema: Optional[str] = None, **kw: Any) -> List[str]:
        return self._tables(connection, schema, "BASE TABLE")

    @reflection.cache
    def get_view_names(self, connection: Any, schema: Optional[str] = None, **kw: Any) -> List[str]:
        return self._tables(connection, schema, "VIEW")

    def has_table(self, connection: Any, table_name: str, schema: Optional[str] = None, **kw: Any) -> bool:
        rows = self._rows(
            connection,
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?",
            (schema or self.default_schema_name, table_name),
        )
        return bool(rows and rows[0][0])

    def has_schema(self, connection: Any, schema_name: str, **kw: Any) -> bool:
        return schema_name in self.get_schema_names(connection)

    @reflection.cache
    def get_columns(self, connection: Any, table_name: str, schema: Optional[str] = None, **kw: Any) -> List[Dict[str, Any]]:
        rows = self._rows(
            connection,
            "SELECT column_name, data_type, is_nullable, column_default FROM information_schema.columns "
            "WHERE table_schema = ? AND table_name = ? ORDER BY ordinal_position",
            (schema or self.default_schema_name, table_name),
        )
        if not rows:
            raise exc.NoSuchTableError(f"{schema}.{table_name}" if schema else table_name)
        return [
            {
                "name": name,
                "type": column_type(data_type),
                "nullable": str(nullable).upper() != "NO",
                "default": default_value,
            }
            for name, data_type, nullable, default_value in rows
        ]

    def get_pk_constraint(self, connection: Any, table_name: str, schema: Optional[str] = None, **kw: Any) -> Dict[str, Any]:
        return {"constrained_columns": [], "name": None}

    def get_foreign_keys(self, connection: Any, table_name: str, schema: Optional[str] = None, **kw: Any) -> List[Any]:
        return []

    def get_indexes(self, connection: Any, table_name: str, schema: Optional[str] = None, **kw: Any) -> List[Any]:
        return []

    def get_unique_constraints(self, connection: Any, table_name: str, schema: Optional[str] = None, **kw: Any) -> List[Any]:
        return []

    def get_check_constraints(self, connection: Any, table_name: str, schema: Optional[str] = None, **kw: Any) -> List[Any]:
        return []

    def get_table_comment(self, connection: Any, table_name: str, schema: Optional[str] = None, **kw: Any) -> Dict[str, Any]:
        return {"text": None}


class AccelsqlGrpcDialect(AccelsqlDialect):
    """``accelsql+grpc://user:password@host:port[?tls=true&dialect=exasol…]``: a client of
    ``accelsql serve`` (Arrow Flight SQL; needs ``pip install 'accelsql[server]'``)."""

    driver = "grpc"
    supports_statement_cache = True

    def create_connect_args(self, url: Any) -> Tuple[List[Any], Dict[str, Any]]:
        options = dict(url.query)
        tls = str(options.pop("tls", "false")).lower() in ("1", "true", "yes")
        scheme = "grpc+tls" if tls else "grpc"
        target = f"{scheme}://{url.host or '127.0.0.1'}:{url.port or 50051}"
        kwargs: Dict[str, Any] = {"lower_ident": True}
        if url.username is not None:
            kwargs["user"] = url.username
        if url.password is not None:
            kwargs["password"] = url.password
        for key in ("dialect", "schema"):
            if key in options:
                kwargs[key] = options.pop(key)
        kwargs.update(options)
        return [target], kwargs
