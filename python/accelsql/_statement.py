"""Statement: the result of ``Connection.execute``, fetched as tuples (pyexasol's and DB-API's habits)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple

import pyarrow as pa

if TYPE_CHECKING:
    import pandas

#: Rows ``fetchmany()`` returns when no size is given (as pyexasol).
DEFAULT_FETCHMANY_SIZE = 10000


def _python_values(column: "pa.Array[Any]") -> List[Any]:
    """A column as Python values; nanosecond timestamps become datetime.datetime (to the
    microsecond), as DB-API drivers return them, rather than pandas.Timestamp."""
    kind = column.type
    if pa.types.is_timestamp(kind) and kind.unit == "ns":
        column = column.cast(pa.timestamp("us", kind.tz), safe=False)
    elif pa.types.is_time64(kind) and kind.unit == "ns":
        column = column.cast(pa.time64("us"), safe=False)
    elif pa.types.is_duration(kind) and kind.unit == "ns":
        column = column.cast(pa.duration("us"), safe=False)
    return column.to_pylist()


class Statement:
    """The result of one ``Connection.execute`` call (its last statement's, when it ran several).

    The whole result is already computed and held as a :class:`pyarrow.Table`; fetching turns
    it into tuples of Python values (``None`` for NULL, :class:`decimal.Decimal`,
    :class:`datetime.date`, :class:`datetime.datetime` as pyarrow gives them), one batch at a
    time. Iterating yields the rows not fetched yet.
    """

    def __init__(self, table: pa.Table, *, dml: bool = False) -> None:
        """Wraps ``table``; ``dml``: the statement was INSERT/UPDATE/DELETE (its one row is the
        affected-row count)."""
        self._table = table
        self._dml = dml
        self._batches: Optional[Iterator[pa.RecordBatch]] = None  # made on the first fetch
        self._rows: List[Tuple[Any, ...]] = []
        self._pos = 0
        self._fetched = 0  # rows handed out so far
        self._closed = False

    # -- fetching ------------------------------------------------------------------------------

    def _fill(self) -> bool:
        """Makes sure an unfetched row is buffered; False at the end of the result."""
        if self._batches is None:
            self._batches = iter(self._table.to_batches())
        while self._pos >= len(self._rows):
            batch = next(self._batches, None)
            if batch is None:
                return False
            columns = [_python_values(column) for column in batch.columns]
            if columns:
                self._rows = list(zip(*columns))
            else:
                self._rows = [()] * batch.num_rows
            self._pos = 0
        return True

    def fetchone(self) -> Optional[Tuple[Any, ...]]:
        """The next row as a tuple, or None when every row was fetched."""
        if not self._fill():
            return None
        row = self._rows[self._pos]
        self._pos += 1
        self._fetched += 1
        return row

    def fetchmany(self, size: Optional[int] = None) -> List[Tuple[Any, ...]]:
        """Up to ``size`` (default 10000) next rows; an empty list at the end."""
        size = DEFAULT_FETCHMANY_SIZE if size is None else size
        out: List[Tuple[Any, ...]] = []
        while len(out) < size and self._fill():
            take = min(size - len(out), len(self._rows) - self._pos)
            out.extend(self._rows[self._pos : self._pos + take])
            self._pos += take
        self._fetched += len(out)
        return out

    def fetchall(self) -> List[Tuple[Any, ...]]:
        """Every row not fetched yet."""
        out: List[Tuple[Any, ...]] = []
        while self._fill():
            out.extend(self._rows[self._pos :])
            self._pos = len(self._rows)
        self._fetched += len(out)
        return out

    def _remaining_arrow(self) -> pa.Table:
        """The rows not fetched yet as a pyarrow Table; they count as fetched after it."""
        if self._closed:
            return self._table.schema.empty_table()
        rest = self._table.slice(self._fetched)
        self._fetched = self._table.num_rows
        self._batches = iter(())
        self._rows = []
        self._pos = 0
        return rest

    def fetchval(self) -> Any:
        """The first column of the next row (None at the end): for ``SELECT COUNT(*) ...``."""
        row = self.fetchone()
        return None if row is None or not row else row[0]

    def fetchcol(self) -> List[Any]:
        """The first column of every row not fetched yet."""
        return [row[0] for row in self.fetchall() if row]

    def __iter__(self) -> Iterator[Tuple[Any, ...]]:
        """Iterates over the rows not fetched yet."""
        return self

    def __next__(self) -> Tuple[Any, ...]:
        """The next row; StopIteration at the end."""
        row = self.fetchone()
        if row is None:
            raise StopIteration
        return row

    # -- about the result ----------------------------------------------------------------------

    def column_names(self) -> List[str]:
        """The result's column names, in order."""
        return list(self._table.column_names)

    def columns(self) -> Dict[str, pa.DataType]:
        """Each column's name and Arrow type, in order."""
        return {field.name: field.type for field in self._table.schema}

    def exasol_columns(self) -> Dict[str, Dict[str, Any]]:
        """Each column's name and type as Exasol (and pyexasol's ``columns()``) describes them:
        ``{"A": {"type": "DECIMAL", "precision": 19, "scale": 0}, "S": {"type": "VARCHAR",
        "size": 2000000, "characterSet": "UTF8"}}``, in order. A column's declared type
        (``VARCHAR(10)``; in the Exasol dialect a string literal's ``CHAR(3) ASCII``) comes
        before its Arrow type's."""
        return {field.name: exasol_field_type(field) for field in self._table.schema}

    def rowcount(self) -> int:
        """Rows in the result; for INSERT/UPDATE/DELETE, the rows it affected."""
        if self._dml and self._table.num_rows == 1 and self._table.num_columns == 1:
            value = self._table.column(0)[0].as_py()
            if isinstance(value, int):
                return value
        return self._table.num_rows

    def to_arrow(self) -> pa.Table:
        """The whole result (fetched rows included) as a pyarrow Table."""
        return self._table

    def to_pandas(self, **kwargs: Any) -> "pandas.DataFrame":
        """The whole result as a pandas DataFrame (``kwargs`` go to ``pyarrow.Table.to_pandas``)."""
        return self._table.to_pandas(**kwargs)

    def close(self) -> None:
        """Drops the rows not fetched yet."""
        self._closed = True
        self._batches = iter(())
        self._rows = []
        self._pos = 0

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    def __enter__(self) -> "Statement":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<accelsql.Statement columns={self.column_names()} rows={self._table.num_rows}>"

    def _repr_html_(self) -> str:
        """The result as an HTML table, for notebooks (Jupyter shows it in place of the repr):
        the first :data:`HTML_ROWS` rows, NULL as ``NULL``, and how many rows there are."""
        return html_table(self._table)


#: Rows a notebook shows of a result.
HTML_ROWS = 50


def html_table(table: pa.Table) -> str:
    """The first :data:`HTML_ROWS` rows of ``table`` as an HTML table with its column names
    and Exasol types in the head, every value escaped."""
    import html

    head = "".join(
        f"<th>{html.escape(f.name)}<br><small>{html.escape(str(exasol_field_type(f).get('type', f.type)))}</small></th>"
        for f in table.schema
    )
    shown = table.slice(0, HTML_ROWS)
    columns = [_python_values(c) for c in shown.combine_chunks().columns] if shown.num_columns else []
    body = []
    for i in range(shown.num_rows):
        cells = "".join(
            "<td><i>NULL</i></td>" if col[i] is None else f"<td>{html.escape(str(col[i]))}</td>"
            for col in columns
        )
        body.append(f"<tr>{cells}</tr>")
    more = table.num_rows - shown.num_rows
    footer = f"<p>{table.num_rows} rows" + (f", the first {shown.num_rows} shown" if more > 0 else "") + "</p>"
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{footer}"


_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}

#: The Arrow field metadata key with a column's SQL type as Exasol names it (the engine's
#: ``SQL_TYPE_METADATA_KEY``).
SQL_TYPE_METADATA_KEY = b"accelsql.sql_type"

_DECLARED = re.compile(
    r"^\s*([A-Z ]+?)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?(BYTE|BIT)?\s*\))?\s*(UTF8|ASCII)?\s*$"
)


def exasol_field_type(field: pa.Field) -> Dict[str, Any]:
    """The Exasol type of a result column: the SQL type its metadata declares
    (``SQL_TYPE_METADATA_KEY``), else the one of its Arrow type (``exasol_type``)."""
    declared = (field.metadata or {}).get(SQL_TYPE_METADATA_KEY)
    if declared is not None:
        described = _declared_type(declared.decode("utf-8", "replace"))
        if described is not None:
            return described
    return exasol_type(field.type)


def _declared_type(text: str) -> Optional[Dict[str, Any]]:
    """``VARCHAR(10) UTF8`` → ``{"type": "VARCHAR", "size": 10, "characterSet": "UTF8"}``."""
    m = _DECLARED.match(text.upper())
    if m is None:
        return None
    name, first, second, unit, charset = m.groups()
    if name in ("VARCHAR", "CHAR"):
        return {"type": name, "size": int(first or 2000000), "characterSet": charset or "UTF8"}
    if name == "DECIMAL":
        return {"type": "DECIMAL", "precision": int(first or 18), "scale": int(second or 0)}
    if name == "GEOMETRY":
        return {"type": "GEOMETRY", "srid": int(first or 0)}
    if name == "HASHTYPE":
        size = int(first or 16)
        return {"type": "HASHTYPE", "size": size // 8 if unit == "BIT" else size}
    if first is None:
        return {"type": name}
    return None


def exasol_type(t: pa.DataType) -> Dict[str, Any]:
    """The Exasol type (as pyexasol's ``columns()`` describes one) of values of Arrow type ``t``:
    integers are ``DECIMAL`` with the digits their width holds (``DECIMAL(19,0)`` for int64),
    floats ``DOUBLE``, strings ``VARCHAR(2000000) UTF8``; a type Exasol lacks keeps Arrow's name."""
    if pa.types.is_integer(t):
        digits = _INT_DIGITS.get(t.bit_width, 19)
        if pa.types.is_unsigned_integer(t) and t.bit_width == 64:
            digits = 20
        return {"type": "DECIMAL", "precision": digits, "scale": 0}
    if pa.types.is_decimal(t):
        return {"type": "DECIMAL", "precision": t.precision, "scale": t.scale}
    if pa.types.is_floating(t):
        return {"type": "DOUBLE"}
    if pa.types.is_boolean(t):
        return {"type": "BOOLEAN"}
    if pa.types.is_date(t):
        return {"type": "DATE"}
    if pa.types.is_timestamp(t):
        if t.tz is not None:
            return {"type": "TIMESTAMP WITH LOCAL TIME ZONE"}
        return {"type": "TIMESTAMP"}
    if pa.types.is_string(t) or pa.types.is_large_string(t) or str(t) == "string_view":
        return {"type": "VARCHAR", "size": 2000000, "characterSet": "UTF8"}
    if pa.types.is_interval(t) or pa.types.is_duration(t):
        return {"type": "INTERVAL DAY TO SECOND", "precision": 2, "fraction": 3}
    if pa.types.is_null(t):
        return {"type": "VARCHAR", "size": 2000000, "characterSet": "UTF8"}
    return {"type": str(t).upper()}
