"""exa, exa.meta and its column objects, and the names a script sees without import."""

import datetime as _dt

from . import state
from .values import _I64_MAX, _I64_MIN, _need_decimal
from .wire import (
    F_CONNECTION,
    F_GET_CONNECTION,
    F_IMPORT,
    F_SCRIPT,
    T_BIGINT,
    T_BOOLEAN,
    T_CHAR,
    T_DATE,
    T_DECIMAL,
    T_DOUBLE,
    T_INTEGER,
    T_SMALLINT,
    T_GEOMETRY,
    T_HASHTYPE,
    T_INTERVAL_DS,
    T_INTERVAL_YM,
    T_TIMESTAMP,
    T_TIMESTAMP_LTZ,
    T_VARCHAR,
    W_I64,
    W_I128,
    _s,
)

class Column(object):
    """One input or output column, as exa.meta.input_columns / output_columns show it."""

    # sql_type is Exasol's text ('VARCHAR(10) UTF8', 'DECIMAL(18,0)'); decl the type as the
    # script declared it, which error messages name.
    __slots__ = ("name", "type", "sql_type", "precision", "scale", "length", "kind", "wire", "lo", "hi", "decl")

    def __repr__(self):
        return "Column(name=%r, sql_type=%r)" % (self.name, self.sql_type)


def _read_column(r):
    c = Column()
    c.name = r.str()
    c.kind = r.u8()
    c.wire = r.u8()
    c.precision = r.u32() or None
    c.scale = r.i32()
    c.length = r.u32() or None
    c.decl = r.str()
    c.sql_type = r.str()
    k = c.kind
    c.lo = c.hi = None
    if k == T_DECIMAL:
        if c.scale == 0:
            c.type = int
        else:
            c.type = _need_decimal().Decimal
    elif k in (T_INTERVAL_YM, T_INTERVAL_DS):
        # Exasol passes intervals as their text ('+05-03', '+02 10:20:30.500').
        c.scale = c.scale if k == T_INTERVAL_DS else None
        c.type = str
    else:
        c.scale = 0 if k in (T_SMALLINT, T_INTEGER, T_BIGINT) else None
        c.type = {
            T_BOOLEAN: bool,
            T_SMALLINT: int,
            T_INTEGER: int,
            T_BIGINT: int,
            T_DOUBLE: float,
            T_VARCHAR: str,
            T_CHAR: str,
            T_DATE: _dt.date,
            T_TIMESTAMP: _dt.datetime,
            T_TIMESTAMP_LTZ: _dt.datetime,
            T_GEOMETRY: str,
            T_HASHTYPE: str,
        }[k]
    if c.wire == W_I64:
        if k == T_BIGINT:
            c.lo, c.hi = _I64_MIN, _I64_MAX
        else:
            c.hi = 10 ** c.precision - 1
            c.lo = -c.hi
    elif c.wire == W_I128:
        c.hi = 10 ** c.precision - 1
        c.lo = -c.hi
    return c


class Meta(object):
    """exa.meta: what the script knows about itself and its call."""

    def __repr__(self):
        return "Meta(%s)" % ", ".join("%s=%r" % kv for kv in sorted(self.__dict__.items()) if kv[0] != "script_code")


class Exa(object):
    """The module-level global `exa` of a script."""

    def __init__(self, meta):
        self.meta = meta
        self._modules = {}  # qualified name -> module, one per instance
        self._asked = {}  # name as asked -> module

    def import_script(self, name):
        """The module of another script (`schema.name`, or a plain name as SQL resolves it):
        its code runs once per instance, at the first import; later imports return the same
        module. The imported code sees `exa` too."""
        if not isinstance(name, str):
            raise TypeError("exa.import_script(name): name must be a str, not %s" % type(name).__name__)
        module = self._asked.get(name)
        if module is not None:
            return module
        ch = state.CHANNEL
        if ch is None:
            raise ImportError("exa.import_script(%r): no engine to ask" % (name,))
        r = ch.request(F_IMPORT, [_s(name)], F_SCRIPT)
        if r.u8() != 1:
            raise ImportError("exa.import_script(%r): %s" % (name, r.str()))
        qualified = r.str()
        code = r.str()
        module = self._modules.get(qualified)
        if module is None:
            import types

            module = types.ModuleType(qualified)
            module.__file__ = "<script %s>" % qualified
            preset_globals(module.__dict__, self)
            # Registered before its code runs, so that scripts importing each other get the
            # module being made rather than a second copy.
            self._modules[qualified] = module
            try:
                exec(compile(code, module.__file__, "exec"), module.__dict__)
                late_globals(module.__dict__)
            except BaseException:
                del self._modules[qualified]
                raise
        self._asked[name] = module
        return module

    class ConnectionInformation(object):
        """A connection as exa.get_connection(name) returns it: type ('password'), address,
        user, password (str() and repr() leave the password out)."""

        __slots__ = ("type", "address", "user", "password")

        def __init__(self, type, address, user, password):
            self.type = type
            self.address = address
            self.user = user
            self.password = password

        def __str__(self):
            return "ConnectionInformation(type=%r, address=%r, user=%r)" % (self.type, self.address, self.user)

        __repr__ = __str__

    def get_connection(self, name):
        """The connection `name` (CREATE CONNECTION), as an exa.ConnectionInformation; an
        ImportError (Exasol's F-UDF-CL-SL-PYTHON-1121) when there is none."""
        if not isinstance(name, str):
            raise TypeError("exa.get_connection(name): name must be a str, not %s" % type(name).__name__)
        ch = state.CHANNEL
        if ch is None:
            raise ImportError("F-UDF-CL-SL-PYTHON-1121: get_connection for connection name %s failed: no engine to ask" % name)
        r = ch.request(F_GET_CONNECTION, [_s(name)], F_CONNECTION)
        if r.u8() != 1:
            raise ImportError("F-UDF-CL-SL-PYTHON-1121: get_connection for connection name %s failed: %s" % (name, r.str()))
        return _read_connection(r)


def _read_connection(r):
    """str type | str address | str user | str password -> exa.ConnectionInformation. A part the
    connection leaves out (no USER, no IDENTIFIED BY) is None, as in Exasol (where '' is NULL)."""
    kind, address, user, password = r.str(), r.str(), r.str(), r.str()
    return Exa.ConnectionInformation(kind, address or None, user or None, password or None)


class ExaUDFError(Exception):
    """Exasol's ExaUDFError, a global of every script."""


ExaUDFError.__module__ = "builtins"  # errors name it ExaUDFError, as a script-level class

# The type codes Exasol's scripts see as globals, and the iterator kinds.
_TYPE_CODES = {
    "UNSUPPORTED": 0,
    "DOUBLE": 1,
    "INT32": 2,
    "INT64": 3,
    "NUMERIC": 4,
    "TIMESTAMP": 5,
    "DATE": 6,
    "STRING": 7,
    "BOOLEAN": 8,
    "EXACTLY_ONCE": 1,
    "MULTIPLE": 2,
}


def _identity(x):
    return x


def preset_globals(g, exa):
    """The names Exasol's scripts see without import, before their code runs: sys, os, datetime,
    decimal, types, unicode (str), decodeUTF8 and encodeUTF8 (identity), ExaUDFError, exa and
    the type codes. (Not xrange, basestring, unichr: Python 3 has none.)"""
    import decimal
    import os
    import sys
    import types

    g["sys"] = sys
    g["os"] = os
    g["unicode"] = str
    g["decodeUTF8"] = _identity
    g["encodeUTF8"] = _identity
    g["decimal"] = decimal
    g["datetime"] = _dt
    g["types"] = types
    g["ExaUDFError"] = ExaUDFError
    g["exa"] = exa
    g.update(_TYPE_CODES)


def late_globals(g):
    """What Exasol adds after the script's code ran: long = int (so visible in run() and
    cleanup(), not at the top level), and sys, os, unicode, decodeUTF8, encodeUTF8 bound again
    (over the script's own globals of those names)."""
    import os
    import sys

    g["long"] = int
    g["sys"] = sys
    g["os"] = os
    g["unicode"] = str
    g["decodeUTF8"] = _identity
    g["encodeUTF8"] = _identity


def _make_exa(st):
    """exa for the script of INIT st, its meta with Exasol's values and types."""
    import sys

    m = Meta()
    m.database_name = "accelsql"
    m.database_version = st.version
    m.script_name = _exasol_name(st.name)
    m.script_schema = _exasol_name(st.schema)
    m.current_user = st.current_user
    m.scope_user = st.scope_user
    m.current_schema = st.current_schema if st.current_schema is not None else "NULL"
    m.script_code = st.body
    m.script_language = "Python %d.%d.%d" % tuple(sys.version_info[:3])
    m.session_id = str(st.session_id)
    m.statement_id = st.statement_id
    m.node_count = st.node_count
    m.node_id = st.node_id
    m.vm_id = str(st.vm_id)
    m.memory_limit = st.memory_limit
    m.input_type = "SET" if st.is_set else "SCALAR"
    m.output_type = "EMIT" if st.emits else "RETURN"
    m.input_column_count = len(st.inputs)
    m.input_columns = [_meta_column(c) for c in st.inputs]
    m.output_column_count = len(st.outputs)
    # A RETURNS script's one column is RETURN, as Exasol names it.
    m.output_columns = [_meta_column(c) for c in st.outputs] if st.emits else st.outputs
    return Exa(m)


def _meta_column(c):
    """Column c as exa.meta shows it: named as Exasol names it (the call-site column `a` is `A`,
    a quoted `"b"` stays `b`); ctx keeps reading columns by the engine's names."""
    m = Column()
    for slot in Column.__slots__:
        setattr(m, slot, getattr(c, slot))
    m.name = _swap_case(c.name)
    return m


def _swap_case(name):
    """The engine's name for a column as the Exasol dialect names it, each letter's case swapped
    (accelsql folds unquoted names to lower case, Exasol to upper case); a letter whose other case
    is not one letter mapping back (ß) is kept, as the engine keeps it."""
    out = []
    for ch in name:
        other = ch.lower() if ch.isupper() else ch.upper() if ch.islower() else ch
        if len(other) != 1 or (other.swapcase() if len(other.swapcase()) == 1 else None) != ch:
            other = ch
        out.append(other)
    return "".join(out)


def _exasol_name(name):
    """A name as Exasol shows it: accelsql folds unquoted names to lower case where Exasol folds
    them to upper case, so an all-lower-case name is shown upper-case, any other as it is."""
    return name if any(c.isupper() for c in name) else name.upper()
