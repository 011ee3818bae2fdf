"""The accelsql Python UDF worker: one process per UDF instance.

The engine starts it (embedded in the accelsql binary) with a socket as fd 0 and speaks the framed
protocol described in udf-runtime/src/script/wire.rs: INIT (script, metadata, body) -> READY, then
RUN (one batch of rows, or one SET group, as columns) -> RESULT (the output columns), and at the
end FINISH -> DONE. Errors travel back as ERROR frames. The user's script sees Exasol's UDF API
(run(ctx), cleanup(), ctx.<col>, ctx[i], next/reset/size/emit/get_dataframe, exa.meta) plus our
vectorized run_batch(ctx).

Only the standard library of CPython >= 3.8 is needed; pandas is imported for get_dataframe() and
emit(DataFrame), numpy (when importable) for run_batch() columns.
"""

import datetime as _dt
import os
import struct
import sys
from array import array

# ---------------------------------------------------------------------------------------------
# Protocol constants (keep in sync with wire.rs)

_HDR = struct.Struct("<QB")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")

F_INIT, F_READY, F_RUN, F_RESULT, F_FINISH, F_DONE, F_ERROR, F_HELLO = 1, 2, 3, 4, 5, 6, 7, 8
F_IMPORT, F_SCRIPT = 9, 10
E_EXCEPTION, E_BAD_OUTPUT = 1, 2

W_BOOL, W_I64, W_F64, W_I128, W_UTF8, W_DATE32, W_TS_US = 1, 2, 3, 4, 5, 6, 7

T_BOOLEAN, T_SMALLINT, T_INTEGER, T_BIGINT, T_DECIMAL, T_DOUBLE = 1, 2, 3, 4, 5, 6
T_VARCHAR, T_CHAR, T_DATE, T_TIMESTAMP = 7, 8, 9, 10

_WORKER_FILE = (lambda: 0).__code__.co_filename
_LITTLE = sys.byteorder == "little" and array("i").itemsize == 4
_NoneType = type(None)
_EPOCH_ORD = _dt.date(1970, 1, 1).toordinal()
_EPOCH_DT = _dt.datetime(1970, 1, 1)
_US_PER_DAY = 86400 * 1000000
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_MASK64 = (1 << 64) - 1

_decimal = None  # the decimal module, imported when a DECIMAL column with scale > 0 needs it
_DCTX = None


def _need_decimal():
    global _decimal, _DCTX
    if _decimal is None:
        import decimal

        _decimal = decimal
        _DCTX = decimal.Context(prec=80, rounding=decimal.ROUND_HALF_UP)
    return _decimal


class _EngineGone(Exception):
    """The engine closed the protocol socket: exit quietly."""


class _ProtocolError(Exception):
    """A frame did not look like the protocol says."""


class _BadValue(Exception):
    """A value that does not fit its output column."""

    def __init__(self, col, value, message, row):
        Exception.__init__(self, message)
        self.col = col
        self.value = value
        self.message = message
        self.row = row


# ---------------------------------------------------------------------------------------------
# Framing


class _Channel(object):
    def __init__(self, fd):
        self.fd = fd
        self.rf = open(fd, "rb", buffering=1 << 16, closefd=False)

    def read(self):
        try:
            return self._read()
        except (BrokenPipeError, ConnectionResetError):
            raise _EngineGone()

    def _read(self):
        hdr = self.rf.read(9)
        if len(hdr) < 9:
            raise _EngineGone()
        size, kind = _HDR.unpack(hdr)
        payload = self.rf.read(size) if size else b""
        if len(payload) < size:
            raise _EngineGone()
        return kind, payload

    def write(self, kind, parts):
        """Sends one frame; parts are bytes-like (bytes, arrays, numpy arrays)."""
        size = 0
        for p in parts:
            size += len(p) if type(p) is bytes else memoryview(p).nbytes
        data = memoryview(b"".join([_HDR.pack(size, kind)] + parts))
        try:
            while data:
                k = os.write(self.fd, data)
                data = data[k:]
        except (BrokenPipeError, ConnectionResetError):
            raise _EngineGone()


class _Reader(object):
    __slots__ = ("b", "p")

    def __init__(self, payload):
        self.b = memoryview(payload)
        self.p = 0

    def u8(self):
        v = self.b[self.p]
        self.p += 1
        return v

    def u32(self):
        v = _U32.unpack_from(self.b, self.p)[0]
        self.p += 4
        return v

    def i32(self):
        v = _I32.unpack_from(self.b, self.p)[0]
        self.p += 4
        return v

    def u64(self):
        v = _U64.unpack_from(self.b, self.p)[0]
        self.p += 8
        return v

    def take(self, n):
        v = self.b[self.p : self.p + n]
        if len(v) != n:
            raise _ProtocolError("frame too short")
        self.p += n
        return v

    def str(self):
        return bytes(self.take(self.u32())).decode("utf-8")


def _s(text):
    b = text.encode("utf-8", "replace")
    return _U32.pack(len(b)) + b


# ---------------------------------------------------------------------------------------------
# Columns and metadata


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
        ch = _CHANNEL
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


# ---------------------------------------------------------------------------------------------
# Decoding input columns (engine -> Python)


def _unpack(code, mv):
    """The values of the little-endian bytes mv, as an array (or a memoryview cast to code)."""
    if _LITTLE and len(mv) % array(code).itemsize == 0:
        return mv.cast(code)
    a = array(code)
    if _LITTLE:
        a.frombytes(mv)
    else:
        a.frombytes(mv)
        a.byteswap()
    return a


def _decode_raw(r, n, col):
    """Reads one column; returns (values-without-nulls-applied, null mask or None, tag, raw)."""
    tag = r.u8()
    has_nulls = r.u8()
    if tag != col.wire:
        raise _ProtocolError("column %s: wire type %d, expected %d" % (col.name, tag, col.wire))
    mask = r.take(n) if has_nulls else None
    if tag == W_I64 or tag == W_TS_US:
        raw = r.take(8 * n)
    elif tag == W_F64:
        raw = r.take(8 * n)
    elif tag == W_BOOL:
        raw = r.take(n)
    elif tag == W_I128:
        raw = r.take(16 * n)
    elif tag == W_DATE32:
        raw = r.take(4 * n)
    elif tag == W_UTF8:
        offs = _unpack("i", r.take(4 * (n + 1)))
        raw = (offs, r.take(offs[n] if n >= 0 else 0))
    else:
        raise _ProtocolError("unknown wire type %d" % tag)
    return tag, mask, raw


def _to_row_values(n, col, tag, mask, raw):
    """A column for run(ctx): a typed array for BIGINT and DOUBLE columns without NULLs (whose
    iterator run loops drive quickest and whose values are ints and floats like a list's), a
    list (with None for NULL) for the others."""
    if mask is None and _LITTLE:
        code = "q" if tag == W_I64 else "d" if tag == W_F64 else None
        if code is not None:
            a = array(code)
            a.frombytes(raw)
            return a
    return _to_list(n, col, tag, mask, raw)


def _to_list(n, col, tag, mask, raw):
    if tag == W_I64:
        vals = _unpack("q", raw).tolist()
    elif tag == W_F64:
        vals = _unpack("d", raw).tolist()
    elif tag == W_BOOL:
        vals = list(map(bool, bytes(raw)))
    elif tag == W_UTF8:
        offs, data = raw
        data = bytes(data)
        ends = iter(offs)
        next(ends, None)
        if data.isascii():
            s = data.decode("ascii")
            vals = [s[a:b] for a, b in zip(offs, ends)]
        else:
            vals = [data[a:b].decode("utf-8") for a, b in zip(offs, ends)]
        if col.kind == T_CHAR and col.length:
            # CHAR(n) values are blank-padded to n characters, as Exasol hands them over.
            width = col.length
            vals = [v if len(v) >= width else v.ljust(width) for v in vals]
    elif tag == W_DATE32:
        fromord = _dt.date.fromordinal
        e = _EPOCH_ORD
        if mask is None:
            vals = [fromord(d + e) for d in _unpack("i", raw)]
        else:
            vals = [fromord(d + e) if m else None for d, m in zip(_unpack("i", raw), mask)]
            mask = None
    elif tag == W_TS_US:
        td = _dt.timedelta
        ep = _EPOCH_DT
        if mask is None:
            vals = [ep + td(microseconds=u) for u in _unpack("q", raw)]
        else:
            vals = [ep + td(microseconds=u) if m else None for u, m in zip(_unpack("q", raw), mask)]
            mask = None
    elif tag == W_I128:
        a = _unpack("q", raw)
        ints = [(hi << 64) | (lo & _MASK64) for lo, hi in zip(a[0::2], a[1::2])]
        if col.scale:
            dec = _need_decimal()
            D = dec.Decimal
            ctx = _DCTX
            s = -col.scale
            vals = [D(v).scaleb(s, ctx) for v in ints]
        else:
            vals = ints
    else:
        raise _ProtocolError("unknown wire type %d" % tag)
    if mask is not None:
        for i in [i for i, m in enumerate(mask) if not m]:
            vals[i] = None
    return vals


def _to_numpy(np, n, col, tag, mask, raw):
    if mask is None:
        if tag == W_I64:
            return np.frombuffer(raw, dtype="<i8", count=n).copy()
        if tag == W_F64:
            return np.frombuffer(raw, dtype="<f8", count=n).copy()
        if tag == W_BOOL:
            return np.frombuffer(raw, dtype=np.uint8, count=n).astype(bool)
    out = np.empty(n, dtype=object)
    out[:] = _to_list(n, col, tag, mask, raw)
    return out


# ---------------------------------------------------------------------------------------------
# Encoding output columns (Python -> engine)


def _pack(code, vals):
    """The little-endian bytes of vals as an array (a bytes-like object, not copied again)."""
    a = array(code, vals)
    if not _LITTLE:
        a.byteswap()
    return a


def _pack_fast(code, vals):
    """_pack for a list of exactly int (q) or float (d) values: struct is quicker than array for
    the usual batch sizes, array takes less memory for huge ones."""
    if len(vals) <= 65536:
        return struct.pack("<%d%s" % (len(vals), code), *vals)
    return _pack(code, vals)


def _short_repr(v):
    try:
        text = repr(v)
    except Exception:
        text = "<%s object>" % type(v).__name__
    if len(text) > 200:
        text = text[:197] + "..."
    return text


def _bad(col, v, row, why):
    return _BadValue(col, v, why, row)


def _type_name(v):
    t = type(v)
    return t.__name__ if t.__module__ == "builtins" else "%s.%s" % (t.__module__, t.__name__)


def _to_exact(col, v, row):
    """int, Decimal, float or numpy number -> int or Decimal; rejects bool and non-numbers."""
    t = type(v)
    if t is int:
        return v
    if t is bool or t.__name__ == "bool_" or isinstance(v, (str, bytes)):
        raise _bad(col, v, row, "is a %s, not a %s value" % (_type_name(v), col.sql_type))
    if isinstance(v, int):
        return int(v)
    dec = _need_decimal()
    if isinstance(v, dec.Decimal):
        if not v.is_finite():
            raise _bad(col, v, row, "is not a finite number and does not fit %s" % col.sql_type)
        return v
    try:
        if isinstance(v, float):
            f = v
        elif hasattr(v, "__index__"):  # numpy integers
            import operator

            return operator.index(v)
        elif hasattr(v, "__float__"):  # numpy floats
            f = float(v)
        else:
            raise TypeError()
    except (TypeError, ValueError, OverflowError):
        raise _bad(col, v, row, "is a %s, not a %s value" % (_type_name(v), col.sql_type)) from None
    if f != f or f in (float("inf"), float("-inf")):
        raise _bad(col, v, row, "is not a finite number and does not fit %s" % col.sql_type)
    return dec.Decimal(repr(f))


def _to_unscaled(col, v, row):
    """The unscaled integer of v in DECIMAL(p, s) (rounded half up to s digits, like a CAST)."""
    x = _to_exact(col, v, row)
    s = col.scale or 0
    if type(x) is not int:
        dec = _need_decimal()
        try:
            x = int(x.scaleb(s, _DCTX).quantize(dec.Decimal(1), rounding=dec.ROUND_HALF_UP, context=_DCTX))
        except (ArithmeticError, ValueError):
            x = None
    elif s:
        x = x * 10**s
    if x is None or x < col.lo or x > col.hi:
        if col.wire == W_I64 and col.kind == T_BIGINT:
            why = "does not fit BIGINT (a 64-bit integer)"
        else:
            why = "does not fit %s (at most %d digits%s)" % (
                col.sql_type,
                col.precision,
                (", %d of them after the point" % s) if s else "",
            )
        raise _bad(col, v, row, why)
    return x


def _mask_of(vals):
    return bytes([v is not None for v in vals])


def _enc_int(col, vals):
    if list(map(type, vals)).count(int) == len(vals):  # the common case, checked cheaply
        if not vals or (min(vals) >= col.lo and max(vals) <= col.hi):
            return None, _pack_fast("q", vals)
    types = set(map(type, vals))
    nulls = _NoneType in types
    if types <= {int, _NoneType}:
        nonnull = [v for v in vals if v is not None] if nulls else vals
        if not nonnull or (min(nonnull) >= col.lo and max(nonnull) <= col.hi):
            data = [0 if v is None else v for v in vals] if nulls else vals
            return (_mask_of(vals) if nulls else None), _pack("q", data)
    data = [0 if v is None else _to_unscaled(col, v, i) for i, v in enumerate(vals)]
    return (_mask_of(vals) if nulls else None), _pack("q", data)


def _enc_i128(col, vals):
    nulls = False
    out = bytearray()
    pair = struct.Struct("<Qq").pack
    for i, v in enumerate(vals):
        if v is None:
            nulls = True
            x = 0
        else:
            x = _to_unscaled(col, v, i)
        out += pair(x & _MASK64, x >> 64)
    return (_mask_of(vals) if nulls else None), bytes(out)


def _to_float(col, v, row):
    t = type(v)
    if t is float or t is int:
        return float(v)
    if t is bool or isinstance(v, (str, bytes)) or t.__name__ == "bool_":
        raise _bad(col, v, row, "is a %s, not a %s value" % (_type_name(v), col.sql_type))
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        raise _bad(col, v, row, "is a %s, not a %s value" % (_type_name(v), col.sql_type))


def _enc_double(col, vals):
    if list(map(type, vals)).count(float) == len(vals):  # the common case, checked cheaply
        return None, _pack_fast("d", vals)
    types = set(map(type, vals))
    nulls = _NoneType in types
    if types <= {float, int, _NoneType}:
        data = [0.0 if v is None else v for v in vals] if nulls else vals
        try:
            return (_mask_of(vals) if nulls else None), _pack("d", data)
        except (OverflowError, TypeError):
            pass
    data = []
    for i, v in enumerate(vals):
        if v is None:
            data.append(0.0)
            continue
        try:
            data.append(_to_float(col, v, i))
        except OverflowError:
            raise _bad(col, v, i, "is too large for DOUBLE")
    return (_mask_of(vals) if nulls else None), _pack("d", data)


def _enc_bool(col, vals):
    types = set(map(type, vals))
    nulls = _NoneType in types
    if not types <= {bool, _NoneType}:
        data = []
        for i, v in enumerate(vals):
            if v is None or type(v) is bool:
                data.append(v)
            elif type(v).__name__ == "bool_":
                data.append(bool(v))
            else:
                raise _bad(col, v, i, "is a %s, not a BOOLEAN value" % _type_name(v))
        vals = data
    data = [False if v is None else v for v in vals] if nulls else vals
    return (_mask_of(vals) if nulls else None), bytes(data)


def _enc_utf8(col, vals):
    types = set(map(type, vals))
    nulls = _NoneType in types
    if not types <= {str, _NoneType}:
        fixed = []
        for i, v in enumerate(vals):
            if v is None or isinstance(v, str):
                fixed.append(None if v is None else str(v))
            else:
                raise _bad(col, v, i, "is a %s, not a %s value" % (_type_name(v), col.sql_type))
        vals = fixed
    svals = ["" if v is None else v for v in vals] if nulls else vals
    limit = col.length
    if limit is not None and svals and max(map(len, svals)) > limit:
        for i, v in enumerate(svals):
            if len(v) > limit:
                raise _bad(col, v, i, "is %d characters long, longer than %s allows" % (len(v), col.sql_type))
    if col.kind == T_CHAR and limit:
        svals = [v.ljust(limit) for v in svals]
        if nulls:
            svals = ["" if o is None else v for v, o in zip(svals, vals)]
    joined = "".join(svals)
    if joined.isascii():
        data = joined.encode("ascii")
        lens = list(map(len, svals))
    else:
        enc = []
        for i, v in enumerate(svals):
            try:
                enc.append(v.encode("utf-8"))
            except UnicodeEncodeError as e:
                raise _bad(col, v, i, "cannot be encoded as UTF-8 (%s)" % e.reason)
        data = b"".join(enc)
        lens = list(map(len, enc))
    if len(data) >= 1 << 31:
        raise _bad(col, "...", 0, "(and the others of this run) make %d bytes of text, more than the 2 GiB one run can return" % len(data))
    offs = [0] * (len(lens) + 1)
    acc = 0
    for i, ln in enumerate(lens):
        acc += ln
        offs[i + 1] = acc
    return (_mask_of(vals) if nulls else None), _pack("i", offs).tobytes() + data


def _enc_date(col, vals):
    nulls = False
    days = []
    e = _EPOCH_ORD
    D, DT = _dt.date, _dt.datetime
    for i, v in enumerate(vals):
        t = type(v)
        if t is D:
            days.append(v.toordinal() - e)
        elif v is None:
            nulls = True
            days.append(0)
        elif isinstance(v, DT):
            if (v.hour, v.minute, v.second, v.microsecond) != (0, 0, 0, 0):
                raise _bad(col, v, i, "has a time of day, so it is not a DATE value")
            days.append(v.toordinal() - e)
        elif isinstance(v, D):
            days.append(v.toordinal() - e)
        else:
            raise _bad(col, v, i, "is a %s, not a DATE value" % _type_name(v))
    return (_mask_of(vals) if nulls else None), _pack("i", days)


def _enc_timestamp(col, vals):
    nulls = False
    us = []
    e = _EPOCH_ORD
    D, DT = _dt.date, _dt.datetime
    for i, v in enumerate(vals):
        if v is None:
            nulls = True
            us.append(0)
        elif isinstance(v, DT):
            if v.tzinfo is not None and v.utcoffset() is not None:
                v = v.astimezone(_dt.timezone.utc).replace(tzinfo=None)
            us.append(
                (v.toordinal() - e) * _US_PER_DAY
                + ((v.hour * 60 + v.minute) * 60 + v.second) * 1000000
                + v.microsecond
            )
        elif isinstance(v, D):
            us.append((v.toordinal() - e) * _US_PER_DAY)
        else:
            raise _bad(col, v, i, "is a %s, not a TIMESTAMP value" % _type_name(v))
    return (_mask_of(vals) if nulls else None), _pack("q", us)


def _numpy_fast(col, arr):
    """Encodes a numeric numpy array without per-value Python work; None when it cannot."""
    kind = getattr(getattr(arr, "dtype", None), "kind", None)
    if kind is None or arr.ndim != 1:
        return None
    # astype(copy=False) gives arr itself when it already is what the wire wants.
    if col.wire == W_F64 and kind in "fiu":
        return None, arr.astype("<f8", order="C", copy=False)
    if col.wire == W_I64 and kind in "iu":
        if len(arr) and (int(arr.min()) < col.lo or int(arr.max()) > col.hi):
            return None
        return None, arr.astype("<i8", order="C", copy=False)
    if col.wire == W_BOOL and kind == "b":
        return None, arr.astype("u1", order="C", copy=False)
    return None


def _encode_column(col, vals):
    """One output column: [tag, has_nulls, mask?, values]."""
    w = col.wire
    fast = None
    if not isinstance(vals, list):
        fast = _numpy_fast(col, vals)
        if fast is None:
            vals = vals.tolist() if hasattr(vals, "tolist") else list(vals)
    if fast is not None:
        mask, data = fast
    elif w == W_I64:
        mask, data = _enc_int(col, vals)
    elif w == W_F64:
        mask, data = _enc_double(col, vals)
    elif w == W_UTF8:
        mask, data = _enc_utf8(col, vals)
    elif w == W_BOOL:
        mask, data = _enc_bool(col, vals)
    elif w == W_I128:
        mask, data = _enc_i128(col, vals)
    elif w == W_DATE32:
        mask, data = _enc_date(col, vals)
    elif w == W_TS_US:
        mask, data = _enc_timestamp(col, vals)
    else:
        raise _ProtocolError("unknown wire type %d" % w)
    if mask is None:
        return [bytes((w, 0)), data]
    return [bytes((w, 1)), mask, data]


# ---------------------------------------------------------------------------------------------
# The ctx objects


def _pandas():
    try:
        import pandas
    except ImportError as e:
        raise ImportError(
            "ctx.get_dataframe() and ctx.emit(DataFrame) need the Python package 'pandas', which "
            "%s cannot import (%s): install it into that interpreter (pip install pandas), "
            "or use ctx.<column> and ctx.emit(values...) instead" % (sys.executable, e)
        ) from None
    return pandas


def _is_dataframe(v):
    t = type(v)
    return t.__name__ == "DataFrame" and t.__module__.startswith("pandas")


class _RowContext(object):
    """Exasol's ctx for run(ctx): the current row of the batch (SCALAR) or of the group (SET).

    The current row's values live in slots of the script's subclass (see _make_row_context_class),
    one per input column and named after it where the name can be an attribute, so that
    ctx.<column> is a plain slot read; the run loops and next()/reset() store them.
    """

    __slots__ = ("_cols", "_row", "_start", "_end", "_finished", "_df_done", "_out", "_it", "_n", "_df_row")
    # The slot of each input column (a list, so that ctx[i] out of range says "list index").
    _slot_names = []

    def __getitem__(self, key):
        if isinstance(key, str):
            idx = _STATE.lower_names.get(key.lower())
            if idx is None:
                raise KeyError("no input column %r" % key)
            return getattr(self, self._slot_names[idx])
        return getattr(self, self._slot_names[key])

    def size(self):
        """Number of rows in the current group (1 in a SCALAR script)."""
        return self._end - self._start

    def next(self, reset=False):
        """SET scripts: moves to the next row of the group; False when there is none."""
        if reset:
            return self.reset()
        if self._finished:
            return False
        if self._row + 1 < self._end:
            self._row += 1
            self._load(self._row)
            return True
        self._finished = True
        return False

    def reset(self):
        """SET scripts: back to the first row of the group."""
        self._row = self._start
        self._load(self._row)
        self._finished = False
        self._df_done = False
        return True

    def _load(self, row):
        """Stores the values of `row` in the column slots (generated per script)."""

    def emit(self, *values):
        """EMITS scripts: emits one output row (or a pandas DataFrame of rows)."""
        out = self._out
        if len(values) != len(out):
            if len(values) == 1 and _is_dataframe(values[0]):
                return _emit_dataframe(out, values[0])
            raise TypeError(
                "emit() takes exactly %d argument%s, one per output column (%d given)"
                % (len(out), "" if len(out) == 1 else "s", len(values))
            )
        if len(out) == 1:
            v = values[0]
            if _is_dataframe(v):
                return _emit_dataframe(out, v)
            out[0].append(v)
            return None
        for col, v in zip(out, values):
            col.append(v)
        return None

    def get_dataframe(self, num_rows=1, start_col=0):
        """The next num_rows rows (or 'all') from column start_col on, as a pandas DataFrame;
        None once the group is exhausted, an error after that."""
        if not (num_rows == "all" or (type(num_rows) is int and num_rows > 0)):
            raise ValueError("get_dataframe(): num_rows must be 'all' or an integer > 0, not %r" % (num_rows,))
        ncols = len(self._cols)
        if type(start_col) is not int or start_col < 0 or start_col > ncols:
            raise ValueError(
                "get_dataframe(): start_col must be an integer in 0..%d (there are %d input columns), not %r"
                % (ncols, ncols, start_col)
            )
        if self._df_done:
            raise RuntimeError("get_dataframe(): iteration finished (None was already returned); call ctx.reset() to start again")
        if self._finished:
            self._df_done = True
            return None
        pd = _pandas()
        start = self._row
        end = self._end if num_rows == "all" else min(self._end, start + num_rows)
        names = [c.name for c in _STATE.inputs[start_col:]]
        df = pd.DataFrame({i: list(self._cols[j][start:end]) for i, j in enumerate(range(start_col, ncols))})
        df.columns = names
        if end >= self._end:
            self._finished = True
            self._row = self._end - 1
        else:
            self._row = end
        self._load(self._row)
        return df

    def _scalar_get_dataframe(self, num_rows=1, start_col=0):
        """get_dataframe() of a SCALAR script: the current row is its group."""
        # The run loop iterates self._it (over the first column, or a range): its position
        # says which row is current, with no per-row bookkeeping.
        row = self._it.__reduce__()[2] - 1
        if self._df_row != row:
            self._df_row = row
            self._row = self._start = row
            self._end = row + 1
            self._finished = self._df_done = False
        return _RowContext.get_dataframe(self, num_rows, start_col)


class _RowContextWithFallback(_RowContext):
    """_RowContext that also finds columns by other spellings: ctx.N for column n, ctx._x for a
    column _x. CPython reads slots quickest on classes without __getattr__, so this class is used
    only for scripts that may need it (see _needs_attribute_fallback)."""

    __slots__ = ()

    def __getattr__(self, name):
        idx = _STATE.lower_names.get(name.lower())
        if idx is None:
            raise AttributeError(_no_column_message(name))
        slot = self._slot_names[idx]
        if slot == name:  # an unset slot: never when run(ctx) is called
            raise AttributeError(name)
        return getattr(self, slot)


def _no_column_message(name):
    return "ctx has no input column %r; the input columns are: %s" % (
        name,
        ", ".join(c.name for c in _STATE.inputs) or "(none)",
    )


# Names through which code can reach an attribute by a computed name ("{0.N}".format(ctx)
# included).
_DYNAMIC_ACCESS = frozenset(
    (
        "getattr", "hasattr", "setattr", "delattr", "attrgetter", "methodcaller", "__getattr__",
        "__getattribute__", "__dict__", "vars", "eval", "exec", "compile", "__builtins__",
        "builtins", "__import__", "import_module", "format", "format_map", "Formatter",
    )
)


def _code_strings(code, out):
    """Adds the names and string constants of code and of the code nested in it to out."""
    out.update(code.co_names)
    stack = list(code.co_consts)
    while stack:
        c = stack.pop()
        if isinstance(c, str):
            out.add(c)
        elif isinstance(c, (tuple, frozenset)):
            stack.extend(c)
        elif hasattr(c, "co_consts") and hasattr(c, "co_names"):
            out.update(c.co_names)
            stack.extend(c.co_consts)


def _needs_attribute_fallback(code, slots):
    """Whether the script (its compiled module code) may read a column by a name other than its
    exact one (ctx.N for n), so that ctx needs _RowContextWithFallback's __getattr__: when a
    column's name is not an attribute (it is kept under _v<i>), when the code names an attribute
    that differs from a column's name only in case, or when it reaches attributes by computed
    names (getattr, eval, ...). Python < 3.10 always gets the fallback: the message for a missing
    column relies on AttributeError.name (see _send_exception)."""
    st = _STATE
    if sys.version_info < (3, 10):
        return True
    if any(slot != c.name for slot, c in zip(slots, st.inputs)):
        return True
    strings = set()
    _code_strings(code, strings)
    if not strings.isdisjoint(_DYNAMIC_ACCESS):
        return True
    exact = set(slots)
    lower = {c.name.lower() for c in st.inputs}
    return any(t not in exact and t.lower() in lower for t in strings)


def _disallowed(what, why):
    def method(self, *args, **kwargs):
        raise RuntimeError("%s is not allowed in this script: %s" % (what, why))

    method.__name__ = what.split("(")[0]
    return method


def _batch_getter(i):
    def get(self):
        return self._cols[i]

    return get


class _BatchContext(object):
    """ctx of run_batch(ctx): whole input columns (numpy arrays when numpy is importable)."""

    __slots__ = ("_cols", "_n")

    def __getattr__(self, name):
        idx = _STATE.lower_names.get(name.lower())
        if idx is None:
            raise AttributeError(
                "ctx has no input column %r; the input columns are: %s"
                % (name, ", ".join(c.name for c in _STATE.inputs) or "(none)")
            )
        return self._cols[idx]

    def __getitem__(self, key):
        if isinstance(key, str):
            idx = _STATE.lower_names.get(key.lower())
            if idx is None:
                raise KeyError("no input column %r" % key)
            return self._cols[idx]
        return self._cols[key]

    def size(self):
        """Number of rows of this batch."""
        return self._n

    def get_dataframe(self, num_rows="all", start_col=0):
        """The whole batch from column start_col on, as a pandas DataFrame."""
        pd = _pandas()
        names = [c.name for c in _STATE.inputs[start_col:]]
        df = pd.DataFrame({i: list(self._cols[j]) for i, j in enumerate(range(start_col, len(self._cols)))})
        df.columns = names
        return df

    next = _disallowed("next()", "run_batch(ctx) gets whole columns; there is no row iterator")
    reset = _disallowed("reset()", "run_batch(ctx) gets whole columns; there is no row iterator")
    emit = _disallowed("emit()", "run_batch(ctx) returns its output column")


def _emit_dataframe(out, df):
    if df.shape[1] != len(out):
        raise TypeError(
            "emit(DataFrame): the DataFrame has %d columns, the script emits %d" % (df.shape[1], len(out))
        )
    for j, col in enumerate(out):
        s = df.iloc[:, j]
        vals = s.tolist()
        missing = s.isna().tolist()
        if any(missing):
            vals = [None if m else v for v, m in zip(vals, missing)]
        col.extend(vals)


def _make_context_class(base, getter, reserved):
    ns = {"__slots__": ()}
    for i, c in enumerate(_STATE.inputs):
        name = c.name
        if name.isidentifier() and name not in reserved and not name.startswith("_"):
            ns[name] = property(getter(i))
    return type("Context", (base,), ns)


def _generated(src, names):
    """Functions compiled from `src`, attributed to this file so that tracebacks leave them out."""
    g = {"zip": zip, "iter": iter, "range": range}
    exec(compile(src, _WORKER_FILE, "exec"), g)
    return [g[n] for n in names]


def _make_row_context_class(code):
    """The ctx class of run(ctx) for this script (whose compiled module code is code), and its run
    loop.

    Each input column gets a slot: its own name where that can be an attribute (an identifier, not
    a keyword, not a name of the ctx API, not starting with '_'), else _v<i>. The loop, generated
    for the script's columns, stores each row's values straight into the slots while it calls
    run(ctx): run(ctx, cols, n) -> the list of run's results (SCALAR RETURNS), or None.
    """
    import keyword

    st = _STATE
    reserved = set(dir(_RowContextWithFallback))
    slots = []
    for i, c in enumerate(st.inputs):
        name = c.name
        if (
            name.isidentifier()
            and not keyword.iskeyword(name)
            and name not in reserved
            and not name.startswith("_")
            and name not in slots
        ):
            slots.append(name)
        else:
            slots.append("_v%d" % i)
    k = len(slots)
    targets = ", ".join("ctx.%s" % s for s in slots)
    if k == 0:
        head = "it = iter(range(n))\n    ctx._it = it\n"
        each = "_ in it"
    elif k == 1:
        head = "it = iter(cols[0])\n    ctx._it = it\n"
        each = "%s in it" % targets
    else:
        head = "it = iter(cols[0])\n    ctx._it = it\n"
        each = "(%s) in zip(it, %s)" % (targets, ", ".join("cols[%d]" % i for i in range(1, k)))
    if st.emits:
        body = "    for %s:\n        run(ctx)\n" % each
    else:
        body = "    return [run(ctx) for %s]\n" % each
    loads = "".join("%sself.%s = cols[%d][row]\n" % ("{0}", s, i) for i, s in enumerate(slots))
    src = (
        "def loop(run, ctx, cols, n):\n    " + head + body + "\n"
        "def _load(self, row):\n    cols = self._cols\n" + loads.format("    ") + "\n"
        "def next(self, reset=False):\n"
        "    if reset:\n"
        "        return self.reset()\n"
        "    if self._finished:\n"
        "        return False\n"
        "    row = self._row + 1\n"
        "    if row < self._end:\n"
        "        self._row = row\n"
        "        cols = self._cols\n" + loads.format("        ") + "        return True\n"
        "    self._finished = True\n"
        "    return False\n"
    )
    loop, load, next_row = _generated(src, ["loop", "_load", "next"])
    next_row.__doc__ = _RowContext.next.__doc__
    ns = {"__slots__": tuple(slots), "_slot_names": slots, "_load": load, "next": next_row}
    if not st.is_set:
        why = "it is a SCALAR script (one row per run); only SET scripts iterate over a group"
        ns["next"] = _disallowed("next()", why)
        ns["reset"] = _disallowed("reset()", why)
        ns["get_dataframe"] = _RowContext._scalar_get_dataframe
    if not st.emits:
        ns["emit"] = _disallowed("emit()", "it RETURNS %s: return the value from run(ctx) instead" % st.outputs[0].sql_type)
    base = _RowContextWithFallback if _needs_attribute_fallback(code, slots) else _RowContext
    return type("Context", (base,), ns), loop


# ---------------------------------------------------------------------------------------------
# Errors


def _exception_text(exc):
    """(line in the script or 0, traceback text without worker frames)."""
    import linecache
    import traceback

    fname = _STATE.filename if _STATE else None
    if fname and _STATE.body is not None and fname not in linecache.cache:
        lines = _STATE.body.splitlines(True)
        linecache.cache[fname] = (len(_STATE.body), None, lines, fname)
    line = 0
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == fname:
            line = lineno
    if isinstance(exc, SyntaxError) and exc.filename == fname and exc.lineno:
        line = exc.lineno
    te = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    seen = set()
    stack = [te]
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        kept = [f for f in t.stack if f.filename != _WORKER_FILE]
        t.stack = traceback.StackSummary.from_list(kept)
        for nxt in (t.__cause__, t.__context__):
            if nxt is not None:
                stack.append(nxt)
    text = "".join(te.format())
    return line, text


def _send_exception(ch, exc, phase):
    if (
        isinstance(exc, AttributeError)
        and getattr(exc, "name", None) is not None
        and isinstance(getattr(exc, "obj", None), _RowContext)
        and exc.name not in dir(type(exc.obj))
    ):
        # A ctx without the fallback __getattr__: say what that would have said (and suggest
        # nothing, as it did not).
        exc.args = (_no_column_message(exc.name),)
        exc.name = exc.obj = None
    try:
        line, text = _exception_text(exc)
    except Exception as e:  # never fail to report
        line, text = 0, "(traceback unavailable: %r)" % (e,)
    t = type(exc)
    name = t.__qualname__ if t.__module__ in ("builtins", "__main__") else "%s.%s" % (t.__module__, t.__qualname__)
    if isinstance(exc, SyntaxError):
        message = exc.msg or str(exc)
    else:
        try:
            message = str(exc)
        except Exception:
            message = "<unprintable %s>" % name
    ch.write(F_ERROR, [bytes((E_EXCEPTION,)), _s(name), _s(message), _U32.pack(line), _s(text), _s(phase)])


def _send_bad_value(ch, bad):
    ch.write(
        F_ERROR,
        [
            bytes((E_BAD_OUTPUT,)),
            _s(bad.col.name),
            _s(bad.col.sql_type),
            _s(_short_repr(bad.value)),
            _s(bad.message),
            _U64.pack(bad.row),
        ],
    )


# ---------------------------------------------------------------------------------------------
# The main loop


class _State(object):
    pass


_STATE = None
# The protocol channel, for exa.import_script (set by main()).
_CHANNEL = None


def _read_init(payload):
    st = _State()
    r = _Reader(payload)
    st.schema = r.str()
    st.name = r.str()
    st.language = r.str()
    st.is_set = r.u8() == 1
    st.emits = r.u8() == 1
    st.session_id = r.u64()
    st.statement_id = r.u64()
    st.node_count = r.u32()
    st.node_id = r.u32()
    st.vm_id = r.u32()
    st.variadic = r.u8() == 1
    st.inputs = [_read_column(r) for _ in range(r.u32())]
    st.outputs = [_read_column(r) for _ in range(r.u32())]
    st.version = r.str()
    st.body = r.str()
    st.filename = "<script %s.%s>" % (st.schema, st.name) if st.schema else "<script %s>" % st.name
    st.lower_names = {}
    for i, c in enumerate(st.inputs):
        st.lower_names.setdefault(c.name, i)
    for i, c in enumerate(st.inputs):
        st.lower_names.setdefault(c.name.lower(), i)
    return st


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


def _run(st, payload, run, run_batch, ctx_cls, batch_cls):
    r = _Reader(payload)
    n = r.u64()
    ncols = r.u32()
    if ncols != len(st.inputs):
        raise _ProtocolError("RUN frame has %d columns, the script has %d inputs" % (ncols, len(st.inputs)))
    raws = [_decode_raw(r, n, c) for c in st.inputs]
    if run_batch is not None:
        np = _numpy()
        ctx = object.__new__(batch_cls)
        if np is not None:
            ctx._cols = [_to_numpy(np, n, c, *raw) for c, raw in zip(st.inputs, raws)]
        else:
            ctx._cols = [_to_list(n, c, *raw) for c, raw in zip(st.inputs, raws)]
        ctx._n = n
        result = run_batch(ctx)
        if result is None:
            raise TypeError("run_batch(ctx) returned None; it must return a column of %d values" % n)
        if hasattr(result, "to_numpy"):
            result = result.to_numpy()
        if isinstance(result, (str, bytes)) or not hasattr(result, "__len__"):
            raise TypeError(
                "run_batch(ctx) must return a list, tuple or array of %d values, not a %s" % (n, _type_name(result))
            )
        if len(result) != n:
            raise ValueError("run_batch(ctx) returned %d values for a batch of %d rows" % (len(result), n))
        if isinstance(result, tuple):
            result = list(result)
        return n, [result]

    cols = [_to_row_values(n, c, *raw) for c, raw in zip(st.inputs, raws)]
    ctx_cls, loop = ctx_cls
    ctx = object.__new__(ctx_cls)
    ctx._cols = cols
    ctx._finished = False
    ctx._df_done = False
    ctx._df_row = -1
    out = [[] for _ in st.outputs]
    ctx._out = out
    if st.is_set:
        if n == 0:
            return (0, out) if st.emits else (1, [[None]])
        ctx._row = 0
        ctx._start = 0
        ctx._end = n
        ctx._load(0)
        value = run(ctx)
        if st.emits:
            return len(out[0]) if out else 0, out
        return 1, [[value]]
    ctx._row = ctx._start = 0
    ctx._end = 1
    ctx._n = n
    res = loop(run, ctx, cols, n)
    if st.emits:
        return len(out[0]) if out else 0, out
    return n, [res]


_NUMPY = False


def _numpy():
    global _NUMPY
    if _NUMPY is False:
        try:
            import numpy

            _NUMPY = numpy
        except ImportError:
            _NUMPY = None
    return _NUMPY


def _encode_result(st, nrows, out):
    parts = [_U32.pack(len(out)), _U64.pack(nrows)]
    for col, vals in zip(st.outputs, out):
        if len(vals) != nrows:
            raise _ProtocolError("output column %s has %d values, expected %d" % (col.name, len(vals), nrows))
        parts.extend(_encode_column(col, vals))
    return parts


def main():
    global _STATE, _CHANNEL
    # fd 0 is the protocol socket: keep a private, non-inheritable copy, then point fd 0 at
    # /dev/null and fd 1 at stderr so that input() and print() of the script cannot touch it.
    proto = os.dup(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    # print() output goes to stderr, which the engine keeps for error messages: line-buffered, so
    # that the last lines before a crash are not lost in a buffer.
    try:
        sys.stdout.reconfigure(line_buffering=True)
    except Exception:
        pass
    _forget_worker_dir()
    ch = _Channel(proto)
    _CHANNEL = ch
    impl = sys.implementation.name
    ch.write(F_HELLO, [_s("%s %s (%s)" % (impl, sys.version.split()[0], sys.executable))])
    try:
        kind, payload = ch.read()
        if kind != F_INIT:
            raise _ProtocolError("expected INIT, got frame %d" % kind)
        st = _read_init(payload)
        _STATE = st
        import types

        module = types.ModuleType("accelsql_script")
        g = module.__dict__
        g["exa"] = _make_exa(st)
        sys.modules["accelsql_script"] = module
        try:
            code = compile(st.body, st.filename, "exec")
            exec(code, g)
            run = g.get("run")
            run_batch = g.get("run_batch") if (not st.is_set and not st.emits) else None
            if run_batch is not None and not callable(run_batch):
                run_batch = None
            if run_batch is None and not callable(run):
                raise NameError("the script defines no run(ctx) function%s" % (
                    "" if (st.is_set or st.emits) else " (nor run_batch(ctx))"))
        except BaseException as e:  # module-level code of the user
            _send_exception(ch, e, "start")
            return
        if run_batch is not None:
            _numpy()  # import it now: its import time belongs to the start, not the first run
        ctx_cls = _make_row_context_class(code)
        batch_cls = _make_context_class(_BatchContext, _batch_getter, set(dir(_BatchContext)))
        ch.write(F_READY, [bytes((1 if run_batch is not None else 0, 1 if callable(g.get("cleanup")) else 0))])
        while True:
            kind, payload = ch.read()
            if kind == F_RUN:
                try:
                    nrows, out = _run(st, payload, run, run_batch, ctx_cls, batch_cls)
                except _ProtocolError:
                    raise
                except BaseException as e:
                    _send_exception(ch, e, "run")
                    continue
                try:
                    parts = _encode_result(st, nrows, out)
                except _BadValue as bad:
                    _send_bad_value(ch, bad)
                    continue
                except _ProtocolError:
                    raise
                except Exception as e:  # e.g. a value whose __float__ or __len__ raises
                    _send_exception(ch, e, "run")
                    continue
                try:
                    sys.stdout.flush()
                except Exception:
                    pass
                ch.write(F_RESULT, parts)
            elif kind == F_FINISH:
                cleanup = g.get("cleanup")
                if callable(cleanup):
                    try:
                        cleanup()
                    except BaseException as e:
                        _send_exception(ch, e, "cleanup")
                        return
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                except Exception:
                    pass
                ch.write(F_DONE, [])
                return
            else:
                raise _ProtocolError("unexpected frame %d" % kind)
    except _EngineGone:
        return
    except _ProtocolError as e:
        sys.stderr.write("accelsql worker: protocol error: %s\n" % e)
        os._exit(70)


# ---------------------------------------------------------------------------------------------
# The fork server: warm worker starts
#
# Started by the engine as `python3 -c <bootstrap> <dir> --accelsql-fork-server` with the workers'
# own environment, a SOCK_SEQPACKET control socket as fd 0 and stdout, stderr on /dev/null (a
# worker's stderr is its own pipe, passed with its fork request). It imports what a
# worker needs (and numpy, when importable), says READY (b"R" + description), then forks one
# fresh worker per request. Requests on the control socket:
#   b"F" with three fds (SCM_RIGHTS): the worker's protocol socket, its stderr and a status pipe.
#        On the status pipe the server writes b"P" + i32 pid once forked (or b"E" + reason),
#        and b"X" + i32 wait status once the worker has exited, its process group has been
#        killed and it has been reaped.
#   b"K" + i32 pid: kill that worker's process group now (only while it is still unreaped).
# End of file on the control socket (the engine is gone or done with the server): the workers'
# process groups are killed and reaped, and the server exits. The server and each worker die
# with their parent (PR_SET_PDEATHSIG): the engine's death ends the server and so its workers.
#
# A forked worker is the same as a freshly started one to the script: a new process in a process
# group of its own, the same environment (the server is started with it), module-level code run
# once, its own random state (random reseeds itself after fork; numpy's global RandomState is
# reseeded here), its own cleanup().

FORK_SERVER_ARG = "--accelsql-fork-server"
_PR_SET_PDEATHSIG = 1


def _forget_worker_dir():
    """The bootstrap put this file's directory first on sys.path to import it; the script's own
    imports must not see it."""
    here = globals().get("__file__")
    if here and sys.path and sys.path[0] == os.path.dirname(here):
        del sys.path[0]


def _warm_up():
    """Imports what workers would import anyway: the worker's lazily used standard modules, and
    numpy (run_batch columns) when it imports cleanly; a failed import leaves no trace, so that a
    worker importing it gets the same error as a fresh process would."""
    global _NUMPY
    import decimal, keyword, linecache, traceback, types  # noqa: F401

    before = set(sys.modules)
    try:
        import numpy

        _NUMPY = numpy
    except Exception:
        for name in set(sys.modules) - before:
            del sys.modules[name]


def _ignore_signal(signum, frame):
    pass


def _close_quietly(fd):
    try:
        os.close(fd)
    except OSError:
        pass


def _write_quietly(fd, data):
    try:
        os.write(fd, data)
    except OSError:
        pass


def _serve_forks():
    """Runs the fork server; returns only in a forked worker, ready to run main()."""
    import select
    import signal
    import socket

    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
        prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        prctl.restype = ctypes.c_int
    except Exception as e:
        sys.stderr.write("accelsql fork server: prctl is not available (%s)\n" % (e,))
        sys.stderr.flush()
        os._exit(71)
    ctl = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    _forget_worker_dir()
    environ = dict(os.environ)
    _warm_up()
    # What the server holds now outlives every worker: keep the collector of a worker from
    # walking it (which would write to, and so copy, every page of it after the fork).
    import gc

    gc.collect()
    gc.freeze()
    server = os.getpid()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    # A handler (not SIG_IGN, which would reap children unasked): SIGCHLD wakes up select().
    signal.signal(signal.SIGCHLD, _ignore_signal)
    children = {}  # pid -> status pipe

    def reap():
        for pid in list(children):
            try:
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                info = None
                children.pop(pid, None)
            if info is None or not info.si_pid:
                continue
            try:
                os.killpg(pid, signal.SIGKILL)  # what it started; its group id is still reserved
            except OSError:
                pass
            _, status = os.waitpid(pid, 0)
            fd = children.pop(pid)
            _write_quietly(fd, b"X" + _I32.pack(status))
            _close_quietly(fd)

    def become_worker(sock, err, status):
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in [wake_r, wake_w, status] + list(children.values()):
            _close_quietly(fd)
        ctl.close()
        try:
            os.setpgid(0, 0)
        except OSError:
            pass
        if prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != server:
            os._exit(71)
        os.dup2(sock, 0)
        os.dup2(err, 2)
        os.dup2(err, 1)
        for fd in (sock, err):
            if fd > 2:
                os.close(fd)
        if os.environ != environ:
            os.environ.clear()
            os.environ.update(environ)
        nprandom = sys.modules.get("numpy.random")
        if nprandom is not None:
            try:
                nprandom.seed()
            except Exception:
                pass

    desc = "%s %s (%s)" % (sys.implementation.name, sys.version.split()[0], sys.executable)
    ctl.sendall(b"R" + desc.encode("utf-8", "replace"))
    fd_space = socket.CMSG_SPACE(3 * _I32.size)
    while True:
        try:
            ready = select.select([ctl, wake_r], [], [])[0]
        except InterruptedError:
            continue
        if wake_r in ready:
            try:
                while os.read(wake_r, 512):
                    pass
            except (BlockingIOError, InterruptedError):
                pass
            reap()
        if ctl not in ready:
            continue
        try:
            msg, anc, _flags, _addr = ctl.recvmsg(64, fd_space)
        except InterruptedError:
            continue
        except OSError:
            break
        fds = array("i")
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
        fds = fds.tolist()
        if not msg:
            for fd in fds:
                _close_quietly(fd)
            break
        if msg[:1] == b"F" and len(fds) == 3:
            sock, err, status = fds
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except Exception:
                pass
            try:
                pid = os.fork()
            except OSError as e:
                _write_quietly(status, b"E" + str(e).encode("utf-8", "replace")[:200])
                for fd in fds:
                    _close_quietly(fd)
                continue
            if pid == 0:
                try:
                    become_worker(sock, err, status)
                except BaseException:
                    os._exit(71)
                return
            try:
                os.setpgid(pid, pid)  # as the child does: whoever runs first
            except OSError:
                pass
            _close_quietly(sock)
            _close_quietly(err)
            children[pid] = status
            _write_quietly(status, b"P" + _I32.pack(pid))
        elif msg[:1] == b"K" and len(msg) == 5:
            pid = _I32.unpack_from(msg, 1)[0]
            if pid in children:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
            for fd in fds:
                _close_quietly(fd)
        else:
            for fd in fds:
                _close_quietly(fd)
    # The engine is done with this server: end its workers, then itself.
    for pid in list(children):
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    for pid in list(children):
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            continue
        _write_quietly(children[pid], b"X" + _I32.pack(status))
    os._exit(0)


def _entry():
    if sys.argv[1:2] == [FORK_SERVER_ARG]:
        del sys.argv[1]
        try:
            _serve_forks()
        except BaseException:
            import traceback

            sys.stderr.write("accelsql fork server: internal error\n")
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(70)
    try:
        main()
    except BaseException:  # a bug of this worker, not of the script: say so on stderr
        import traceback

        sys.stderr.write("accelsql worker: internal error\n")
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(70)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    os._exit(0)


_entry()
