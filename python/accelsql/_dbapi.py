"""PEP 249 (DB-API 2.0): the exception classes, type objects, constructors and :class:`Cursor`.

Every error the package raises from the engine is one of the classes here, picked by its
SQLSTATE's class (the code's first two characters), and also an :class:`AccelsqlError` with
``.code`` (and ``.sqlstate``, the same) and ``.message``.
"""

from __future__ import annotations

import datetime
import re
import time
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import pyarrow as pa

from ._accelsql import AccelsqlError
from ._statement import Statement, exasol_field_type
from ._text import bind, literal_end

if TYPE_CHECKING:
    import pandas


# -- exceptions ------------------------------------------------------------------------------------


class Warning(Exception):  # noqa: A001 - the name PEP 249 gives it
    """PEP 249's warning (the engine raises none today)."""


class Error(AccelsqlError):
    """Base class of the package's errors (PEP 249); an :class:`AccelsqlError` with ``code``
    (also ``sqlstate``) and ``message``."""

    code: str
    sqlstate: str
    message: str


class InterfaceError(Error):
    """Misuse of the interface: a closed cursor or connection, wrong parameters."""


class DatabaseError(Error):
    """An error of the engine."""


class DataError(DatabaseError):
    """SQLSTATE class 22: a value out of range, a bad cast, a script failing on its data."""


class OperationalError(DatabaseError):
    """SQLSTATE classes 08, 40, 53, 54, 57, 58: the connection, resources and limits, a
    statement cancelled or timed out."""


class IntegrityError(DatabaseError):
    """SQLSTATE class 23: a constraint violated."""


class InternalError(DatabaseError):
    """SQLSTATE class XX: an internal error of the engine."""


class ProgrammingError(DatabaseError):
    """SQLSTATE class 42 (and 3F, 26, 34, 07): syntax, unknown objects, missing privileges."""


class NotSupportedError(DatabaseError):
    """SQLSTATE class 0A: what the engine does not support."""


_BY_CLASS = {
    "22": DataError,
    "23": IntegrityError,
    "42": ProgrammingError,
    "3F": ProgrammingError,
    "26": ProgrammingError,
    "34": ProgrammingError,
    "07": ProgrammingError,
    "0A": NotSupportedError,
    "08": OperationalError,
    "40": OperationalError,
    "53": OperationalError,
    "54": OperationalError,
    "57": OperationalError,
    "58": OperationalError,
    "XX": InternalError,
}


def error_class(code: Optional[str]) -> type:
    """The PEP 249 class of an error with SQLSTATE ``code`` (``DatabaseError`` for others)."""
    return _BY_CLASS.get((code or "")[:2].upper(), DatabaseError)


def translated(e: AccelsqlError) -> Error:
    """``e`` as an instance of its PEP 249 class, with the same code, message and text."""
    if isinstance(e, Error):
        return e
    code = getattr(e, "code", None) or "XX000"
    out = error_class(code)(str(e))
    out.code = code
    out.sqlstate = code
    out.message = getattr(e, "message", str(e))
    out.__traceback__ = e.__traceback__
    return out


def interface_error(message: str, code: str = "HY000") -> InterfaceError:
    """An :class:`InterfaceError` ``[code] message``."""
    out = InterfaceError(f"[{code}] {message}")
    out.code = code
    out.sqlstate = code
    out.message = message
    return out


# -- type objects and constructors -----------------------------------------------------------------


class DBAPITypeObject:
    """A PEP 249 type object: equal to every ``Cursor.description`` type code it covers (the
    Exasol type names: ``"DECIMAL"``, ``"VARCHAR"``, ``"TIMESTAMP"``, …)."""

    def __init__(self, *values: str) -> None:
        self.values = frozenset(values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DBAPITypeObject):
            return self.values == other.values
        return other in self.values

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self.values)

    def __repr__(self) -> str:
        return f"DBAPITypeObject{tuple(sorted(self.values))}"


STRING = DBAPITypeObject("VARCHAR", "CHAR", "GEOMETRY", "HASHTYPE")
NUMBER = DBAPITypeObject("DECIMAL", "DOUBLE", "BOOLEAN")
DATETIME = DBAPITypeObject(
    "DATE",
    "TIMESTAMP",
    "TIMESTAMP WITH LOCAL TIME ZONE",
    "INTERVAL YEAR TO MONTH",
    "INTERVAL DAY TO SECOND",
)
BINARY = DBAPITypeObject("BINARY")
ROWID = DBAPITypeObject("ROWID")

Date = datetime.date
Time = datetime.time
Timestamp = datetime.datetime
Binary = bytes


def DateFromTicks(ticks: float) -> datetime.date:
    """The local date of ``ticks`` seconds since the epoch (PEP 249)."""
    return Date(*time.localtime(ticks)[:3])


def TimeFromTicks(ticks: float) -> datetime.time:
    """The local time of day of ``ticks`` seconds since the epoch (PEP 249)."""
    return Time(*time.localtime(ticks)[3:6])


def TimestampFromTicks(ticks: float) -> datetime.datetime:
    """The local timestamp of ``ticks`` seconds since the epoch (PEP 249)."""
    return Timestamp(*time.localtime(ticks)[:6])


def _type_code(field: pa.Field) -> Tuple[str, Dict[str, Any]]:
    """A column's type code (its Exasol type name without parameters) and Exasol description."""
    if pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type) or pa.types.is_fixed_size_binary(field.type):
        return "BINARY", {"type": "BINARY"}
    described = exasol_field_type(field)
    name = str(described.get("type", ""))
    if name.startswith("INTERVAL"):
        name = "INTERVAL YEAR TO MONTH" if "MONTH" in name else "INTERVAL DAY TO SECOND"
    return name, described


def description_of(schema: pa.Schema) -> List[Tuple[Any, ...]]:
    """PEP 249's ``description`` of a result: ``(name, type_code, display_size, internal_size,
    precision, scale, null_ok)`` per column; ``type_code`` is the Exasol type name and compares
    equal to :data:`STRING`, :data:`NUMBER`, :data:`DATETIME` or :data:`BINARY`."""
    out = []
    for field in schema:
        code, described = _type_code(field)
        size = described.get("size")
        out.append(
            (
                field.name,
                code,
                size,
                size,
                described.get("precision"),
                described.get("scale"),
                field.nullable,
            )
        )
    return out


# -- parameters -----------------------------------------------------------------------------------

Params = Union[Sequence[Any], Mapping[str, Any]]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PYEXASOL = re.compile(r"(?<!\{)\{[A-Za-z_][A-Za-z0-9_]*(![a-z])?\}")


def parameter_error(message: str) -> "ProgrammingError":
    """A :class:`ProgrammingError` ``[07001] message``: parameters that do not fit the
    statement's placeholders (PEP 249 names ProgrammingError for it)."""
    out = ProgrammingError(f"[07001] {message}")
    out.code = "07001"
    out.sqlstate = "07001"
    out.message = message
    return out


def to_engine_placeholders(sql: str, params: Params) -> Tuple[str, List[Any]]:
    """``sql`` with its placeholders made the engine's ``$1``, ``$2``, … and the values in that
    order. A sequence binds ``?`` (qmark), ``:1`` (numeric) or ``$1``; a mapping binds ``:name``
    (named) or pyexasol's ``{name}``. String literals, quoted names, comments and ``::`` casts
    are left alone."""
    named = isinstance(params, Mapping)
    if not named and (isinstance(params, (str, bytes)) or not isinstance(params, Sequence)):
        raise parameter_error("parameters must be a sequence (?, :1, $1) or a mapping (:name, {name})")
    if named and _PYEXASOL.search(sql):
        # pyexasol's {name} (and its !d/!f/!i/!q conversions): the package's own binding.
        try:
            return bind(sql, params)
        except (KeyError, ValueError, TypeError) as e:
            raise parameter_error(str(e).strip("'\"")) from None
    out: List[str] = []
    values: List[Any] = []
    # Numeric (:1, $1) placeholders name a parameter by position: each once in values.
    slots: Dict[Any, int] = {}
    qmarks = 0
    styles = set()

    def slot(key: Any, value: Any) -> str:
        if key not in slots:
            values.append(value)
            slots[key] = len(values)
        return f"${slots[key]}"

    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        end = literal_end(sql, i)
        if end is not None:
            out.append(sql[i:end])
            i = end
        elif sql.startswith("::", i):
            out.append("::")
            i += 2
        elif c == "?" and not named:
            styles.add("qmark")
            if qmarks >= len(params):
                raise parameter_error(f"the statement has more ? placeholders than the {len(params)} parameters given")
            out.append(slot(("?", qmarks), params[qmarks]))
            qmarks += 1
            i += 1
        elif c in ":$" and not named and i + 1 < n and sql[i + 1].isdigit():
            styles.add("numeric")
            end = i + 1
            while end < n and sql[end].isdigit():
                end += 1
            k = int(sql[i + 1 : end])
            if not 1 <= k <= len(params):
                raise parameter_error(f"placeholder {sql[i:end]} has no value among the {len(params)} parameters")
            out.append(slot(k, params[k - 1]))
            i = end
        elif c == ":" and named and (m := _NAME.match(sql, i + 1)) and not (i > 0 and sql[i - 1] == ":"):
            name = m.group(0)
            if name not in params:
                raise parameter_error(f"placeholder :{name} has no value in the parameters")
            out.append(slot(("name", name), params[name]))
            i = m.end()
        else:
            out.append(c)
            i += 1
    if "qmark" in styles and "numeric" in styles:
        raise parameter_error("a statement mixes ? and numbered placeholders")
    if "qmark" in styles and qmarks != len(params):
        raise parameter_error(f"{len(params)} parameters given for {qmarks} ? placeholders")
    if not named and not styles and len(params) > 0:
        raise parameter_error(f"{len(params)} parameters given for a statement without placeholders")
    return "".join(out), values


_INSERT_VALUES = re.compile(
    r"^\s*(INSERT\s+INTO\s+.+?\bVALUES\s*)\(([^()'\"]*)\)\s*;?\s*$",
    re.IGNORECASE | re.DOTALL,
)

#: Rows of ``executemany`` that go into one ``INSERT … VALUES`` statement.
EXECUTEMANY_ROWS = 1000


# -- the cursor -----------------------------------------------------------------------------------


class Cursor:
    """A PEP 249 cursor of a :class:`~accelsql.Connection`: ``execute``, ``executemany``,
    ``fetchone``/``fetchmany``/``fetchall``, ``description``, ``rowcount``, and Arrow-native
    fetches (``fetch_arrow_table``, ``fetch_df``, ``pl``).

    A statement's result is computed whole by the engine and handed over as Arrow data (no
    copy); fetching turns it into tuples batch by batch. ``cancel()`` from another thread stops
    the running statement (and frees its GPU lease). Cursors of one connection share its
    session; use one cursor per thread.
    """

    #: Rows ``fetchmany()`` returns without a size (PEP 249's default is 1).
    arraysize: int

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self._result: Optional[Statement] = None
        self._description: Optional[List[Tuple[Any, ...]]] = None
        self._rowcount = -1
        self._closed = False
        self.arraysize = 1

    @property
    def connection(self) -> Any:
        """The connection the cursor was made by (a PEP 249 extension)."""
        return self._connection

    @property
    def description(self) -> Optional[List[Tuple[Any, ...]]]:
        """One 7-item tuple per result column (see :func:`description_of`); None after a
        statement without rows (DDL, INSERT) or before the first."""
        return self._description

    @property
    def rowcount(self) -> int:
        """Rows of the last result, or rows the last INSERT/UPDATE/DELETE changed (summed over
        ``executemany``); -1 before the first statement and after DDL."""
        return self._rowcount

    @property
    def lastrowid(self) -> None:
        """None: the engine has no row ids."""
        return None

    def _check(self) -> None:
        if self._closed:
            raise interface_error("the cursor is closed", "HY010")
        if self._connection.closed:
            raise interface_error("the connection is closed", "08003")

    def _run(self, sql: str, values: Optional[List[Any]]) -> Statement:
        return self._connection._run(sql, values)

    def execute(self, operation: str, parameters: Optional[Params] = None) -> "Cursor":
        """Runs ``operation`` (one or more ``;``-separated statements; the last one's result is
        the cursor's) with ``parameters`` bound by the engine, never pasted into the text:
        a sequence for ``?`` (``paramstyle``), ``:1`` or ``$1``; a mapping for ``:name`` or
        pyexasol's ``{name}``. Returns the cursor."""
        self._check()
        self._forget()
        values: Optional[List[Any]] = None
        if parameters is not None:
            operation, values = to_engine_placeholders(operation, parameters)
        self._set(self._run(operation, values), add=False)
        return self

    def executemany(self, operation: str, seq_of_parameters: Sequence[Params]) -> "Cursor":
        """Runs ``operation`` once per parameter row. An ``INSERT … VALUES (…)`` of placeholders
        runs as one statement of many rows (``VALUES (…), (…), …``, up to 1000 rows each); other
        statements run once per row. ``rowcount`` is the total of rows changed."""
        self._check()
        rows = list(seq_of_parameters)
        self._forget()
        self._rowcount = 0
        if not rows:
            return self
        m = _INSERT_VALUES.match(operation)
        if m is not None:
            head, row = m.group(1), m.group(2)
            for start in range(0, len(rows), EXECUTEMANY_ROWS):
                chunk = rows[start : start + EXECUTEMANY_ROWS]
                values: List[Any] = []
                texts: List[str] = []
                for params in chunk:
                    text, bound = to_engine_placeholders(f"({row})", params)
                    # Renumber this row's $k after the rows before it.
                    offset = len(values)
                    texts.append(re.sub(r"\$(\d+)", lambda g: f"${int(g.group(1)) + offset}", text))
                    values.extend(bound)
                sql = head + ", ".join(texts)
                self._set(self._run(sql, values), add=True)
            return self
        for params in rows:
            sql, bound = to_engine_placeholders(operation, params)
            self._set(self._run(sql, bound), add=True)
        return self

    def _forget(self) -> None:
        """Drops the last statement's result (a failing statement leaves none to fetch)."""
        self._result = None
        self._description = None
        self._rowcount = -1

    def _set(self, result: Statement, *, add: bool) -> None:
        table = result.to_arrow()
        if result._dml:
            count = result.rowcount()
            self._rowcount = (self._rowcount if add and self._rowcount > 0 else 0) + count
            self._description = None
            self._result = None
            return
        if table.num_columns == 0:
            # DDL, SET: no rows to fetch.
            self._result = None
            self._description = None
            self._rowcount = -1
        else:
            self._result = result
            self._description = description_of(table.schema)
            self._rowcount = table.num_rows

    def _rows(self) -> Statement:
        self._check()
        if self._result is None:
            raise interface_error("the last statement returned no rows (or none ran)", "24000")
        return self._result

    def fetchone(self) -> Optional[Tuple[Any, ...]]:
        """The next row as a tuple, or None at the end."""
        return self._rows().fetchone()

    def fetchmany(self, size: Optional[int] = None) -> List[Tuple[Any, ...]]:
        """Up to ``size`` (default :attr:`arraysize`) next rows; an empty list at the end."""
        return self._rows().fetchmany(self.arraysize if size is None else size)

    def fetchall(self) -> List[Tuple[Any, ...]]:
        """Every row not fetched yet."""
        return self._rows().fetchall()

    def fetch_arrow_table(self) -> pa.Table:
        """The rows not fetched yet as a pyarrow Table (no conversion to Python values)."""
        return self._rows()._remaining_arrow()

    def fetch_record_batch(self) -> pa.RecordBatchReader:
        """The rows not fetched yet as a pyarrow RecordBatchReader."""
        table = self.fetch_arrow_table()
        return pa.RecordBatchReader.from_batches(table.schema, table.to_batches())

    def fetch_df(self) -> "pandas.DataFrame":
        """The rows not fetched yet as a pandas DataFrame (through Arrow)."""
        return self.fetch_arrow_table().to_pandas()

    def pl(self) -> Any:
        """The rows not fetched yet as a Polars DataFrame (needs ``polars``), through Arrow."""
        try:
            import polars
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise interface_error("Cursor.pl() needs polars: pip install polars", "HY000") from e
        return polars.from_arrow(self.fetch_arrow_table())

    def __iter__(self) -> Iterator[Tuple[Any, ...]]:
        """The rows not fetched yet."""
        return iter(self._rows())

    def __next__(self) -> Tuple[Any, ...]:
        return next(self._rows())

    def callproc(self, procname: str, parameters: Sequence[Any] = ()) -> Sequence[Any]:
        """Calls function or scalar script ``procname`` with ``parameters`` as
        ``SELECT procname(?, …)``; its one row is the cursor's result. Returns ``parameters``
        unchanged (the engine has no output parameters)."""
        if not re.fullmatch(r'[A-Za-z_][A-Za-z0-9_.]*|"[^"]+"(\."[^"]+")?', procname):
            raise parameter_error(f"callproc: {procname!r} is not a function name")
        marks = ", ".join("?" for _ in parameters)
        self.execute(f"SELECT {procname}({marks})", list(parameters))
        return parameters

    def nextset(self) -> None:
        """None: a statement has one result (of several ``;``-separated statements, the last's)."""
        self._check()
        return None

    def setinputsizes(self, sizes: Any) -> None:
        """Accepted and ignored (PEP 249 allows it): the engine types parameters itself."""

    def setoutputsize(self, size: Any, column: Optional[int] = None) -> None:
        """Accepted and ignored (PEP 249 allows it): results come whole."""

    def cancel(self) -> None:
        """Cancels the statement this cursor's connection is running (call it from another
        thread): the statement fails with :class:`OperationalError` 57014 and releases its GPU
        lease."""
        self._connection.cancel()

    def close(self) -> None:
        """Closes the cursor: its rows are dropped, and using it raises
        :class:`InterfaceError`. Closing twice is fine."""
        self._closed = True
        if self._result is not None:
            self._result.close()
        self._result = None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def __enter__(self) -> "Cursor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<accelsql.Cursor {'closed' if self._closed else 'open'}>"
