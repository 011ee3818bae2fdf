"""RemoteNative: the in-process connection's native API over Arrow Flight SQL, for
``accelsql.connect("grpc://host:port")``: statements, parameters and bulk loads travel through
the ADBC Flight SQL driver (``pip install 'accelsql[server]'``) to an ``accelsql serve``."""

from __future__ import annotations

import re
from typing import Any, Optional, Tuple

import pyarrow as pa

from ._accelsql import AccelsqlError

_CODE = re.compile(r"\[([0-9A-Z]{5})\]")
_DML = ("INSERT", "UPDATE", "DELETE", "MERGE")

#: The metadata key the server puts an error's code under (beside the ``[code]`` message prefix).
CODE_METADATA_KEY = "x-accelsql-code"


def is_remote(target: Any) -> bool:
    """Whether ``connect``'s first argument names a server (``grpc://``, ``grpc+tls://``)."""
    return isinstance(target, str) and target.startswith(("grpc://", "grpc+tls://", "grpc+tcp://"))


def _coded(code: str, message: str) -> AccelsqlError:
    err = AccelsqlError(f"[{code}] {message}")
    err.code = code
    err.message = message
    return err


def _error_code(exc: BaseException) -> Optional[str]:
    """The accelsql code of an ADBC error: from the gRPC metadata the driver hands over as
    error details, else from the ``[code]`` in its message."""
    for key, value in getattr(exc, "details", None) or []:
        if key == CODE_METADATA_KEY:
            text = value.decode() if isinstance(value, (bytes, bytearray)) else str(value)
            return text.strip()
    found = _CODE.search(str(exc))
    return found.group(1) if found else None


def _translate(exc: BaseException) -> AccelsqlError:
    """An ADBC exception as the AccelsqlError an in-process connection would raise."""
    text = str(exc)
    code = _error_code(exc) or "08000"
    found = text.find(f"[{code}]")
    message = text[found + len(code) + 2 :].strip() if found >= 0 else text
    # The Go driver appends "(Status; Operation)" to the server's message.
    message = re.sub(r"\s*\([A-Za-z]+; [^()]*\)\s*$", "", message)
    err = _coded(code, message)
    err.__cause__ = exc
    return err


def _last_statement_is_dml(sql: str) -> bool:
    """Whether the last statement of ``sql`` starts with INSERT/UPDATE/DELETE/MERGE (comments,
    quoted text and ``;`` inside them skipped)."""
    last, i, n, start = "", 0, len(sql), 0
    pieces = []
    while i < n:
        c = sql[i]
        if c in "'\"":
            end = sql.find(c, i + 1)
            i = n if end < 0 else end + 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif c == ";":
            pieces.append(sql[start:i])
            start = i + 1
            i += 1
        else:
            i += 1
    pieces.append(sql[start:])
    for piece in reversed(pieces):
        text = re.sub(r"(--[^\n]*\n?|/\*.*?\*/)", " ", piece, flags=re.S).strip()
        if text:
            last = text
            break
    keyword = re.match(r"[A-Za-z]*", last).group(0).upper()
    return keyword in _DML


class RemoteNative:
    """One Flight SQL connection (one server session), with ``NativeConnection``'s methods."""

    def __init__(self, url: str, user: Optional[str], password: Optional[str]) -> None:
        try:
            import adbc_driver_flightsql.dbapi as flightsql
            import adbc_driver_manager
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                "accelsql.connect('grpc://…') needs the ADBC Flight SQL driver: "
                "pip install 'accelsql[server]' (adbc-driver-flightsql, adbc-driver-manager)"
            ) from e
        self._errors = (adbc_driver_manager.Error,)
        db_kwargs = {}
        if user is not None or password is not None:
            # Without a users file the server's token is the password, with any user name.
            db_kwargs["username"] = user if user is not None else "accelsql"
            db_kwargs["password"] = password or ""
        url = url.replace("grpc+tcp://", "grpc://", 1)
        try:
            self._conn = flightsql.connect(url, db_kwargs=db_kwargs, autocommit=True)
        except self._errors as e:
            raise _translate(e) from None
        self._closed = False
        self._running: Any = None

    def _cursor(self):
        if self._closed:
            raise _coded("08003", "the connection is closed")
        return self._conn.cursor()

    def query(self, sql: str, params: Optional[pa.RecordBatch] = None) -> Tuple[pa.Table, bool]:
        """Runs ``sql`` on the server; its last statement's result and whether it is DML."""
        cursor = self._cursor()
        self._running = cursor
        try:
            if params is None:
                cursor.execute(sql)
            else:
                cursor.execute(sql, parameters=params)
            table = cursor.fetch_arrow_table()
        except self._errors as e:
            raise _translate(e) from None
        finally:
            self._running = None
            cursor.close()
        return table, _last_statement_is_dml(sql)

    def cancel(self) -> None:
        """Asks the server to cancel the statement running now on this connection, if any
        (Flight SQL's CancelFlightInfo, through ADBC)."""
        cursor = self._running
        if cursor is not None:
            try:
                cursor.adbc_cancel()
            except (self._errors + (AttributeError,)):
                pass

    def import_arrow(self, data: Any, table: str) -> int:
        """Loads an Arrow table/reader into ``table`` on the server (created when missing)."""
        if not isinstance(data, (pa.Table, pa.RecordBatchReader)):
            data = pa.RecordBatchReader.from_stream(data)
        schema_name = None
        if "." in table and '"' not in table:
            schema_name, table = table.rsplit(".", 1)
        cursor = self._cursor()
        try:
            return int(cursor.adbc_ingest(table, data, mode="create_append", db_schema_name=schema_name))
        except self._errors as e:
            raise _translate(e) from None
        finally:
            cursor.close()

    def register_udf(self, *args: Any) -> None:
        raise _coded(
            "0A000",
            "register_udf needs an in-process connection: a Python callable cannot run inside a "
            "remote server; create a PYTHON3 SCRIPT there instead",
        )

    def restrict(self) -> None:
        raise _coded(
            "0A000",
            "a remote session cannot be restricted by its client; start the server with --restricted",
        )

    @property
    def restricted(self) -> bool:
        return False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._conn.close()
            except self._errors:
                pass

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def gpu_count(self) -> int:
        table, _ = self.query("SELECT count(*) FROM accelsql.gpu_devices")
        return int(table.column(0)[0].as_py())
