"""exa, exa.meta and its column objects, and the names a script sees without import."""

import datetime as _dt

from . import state
from .values import _I64_MAX, _I64_MIN, _need_decimal
from .wire import (
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
    T_TIMESTAMP,
    T_VARCHAR,
    W_I64,
    W_I128,
    _ProtocolError,
    _Reader,
    _s,
)

class Column(object):
    """One input or output column, as exa.meta.input_columns / output_columns show it."""

    __slots__ = ("name", "type", "sql_type", "precision", "scale", "length", "kind", "wire", "lo", "hi")

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
    c.sql_type = r.str()
    k = c.kind
    c.lo = c.hi = None
    if k == T_DECIMAL:
        if c.scale == 0:
            c.type = int
        else:
            c.type = _need_decimal().Decimal
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
        ch.write(F_IMPORT, [_s(name)])
        kind, payload = ch.read()
        if kind != F_SCRIPT:
            raise _ProtocolError("expected SCRIPT, got frame %d" % kind)
        r = _Reader(payload)
        if r.u8() != 1:
            raise ImportError("exa.import_script(%r): %s" % (name, r.str()))
        qualified = r.str()
        code = r.str()
        module = self._modules.get(qualified)
        if module is None:
            import types

            module = types.ModuleType(qualified)
            module.__file__ = "<script %s>" % qualified
            module.__dict__["exa"] = self
            # Registered before its code runs, so that scripts importing each other get the
            # module being made rather than a second copy.
            self._modules[qualified] = module
            try:
                exec(compile(code, module.__file__, "exec"), module.__dict__)
            except BaseException:
                del self._modules[qualified]
                raise
        self._asked[name] = module
        return module

    def get_connection(self, name):
        raise NotImplementedError("exa.get_connection(%r): connections are not supported by accelsql yet" % (name,))


def _make_exa(st):
    m = Meta()
    m.script_name = st.name
    m.script_schema = st.schema
    m.script_language = st.language
    m.script_code = st.body
    m.session_id = st.session_id
    m.statement_id = st.statement_id
    m.node_count = st.node_count
    m.node_id = st.node_id
    m.vm_id = st.vm_id
    m.input_type = "SET" if st.is_set else "SCALAR"
    m.output_type = "EMITS" if st.emits else "RETURNS"
    m.input_column_count = len(st.inputs)
    m.input_columns = st.inputs
    m.output_column_count = len(st.outputs)
    m.output_columns = st.outputs
    m.database_name = "accelsql"
    m.database_version = st.version
    return Exa(m)

