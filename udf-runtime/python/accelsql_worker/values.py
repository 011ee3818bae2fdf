"""The columnar codec: input columns from wire bytes to Python values, output values back."""

import datetime as _dt
import struct
import sys
from array import array

from .wire import _U32, _U64, _ProtocolError, T_BIGINT, T_CHAR, T_INTERVAL_DS, T_INTERVAL_YM, W_BOOL, W_DATE32, W_F64, W_I128, W_I64, W_TS_US, W_UTF8

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


class _BadValue(Exception):
    """A value that does not fit its output column."""

    def __init__(self, col, value, message, row):
        Exception.__init__(self, message)
        self.col = col
        self.value = value
        self.message = message
        self.row = row


class _TooMuchText(_BadValue):
    """A part's text in one column passes the 2 GiB one wire column holds: the part is sent in
    smaller parts (a single value that large fails as a _BadValue)."""

    def __init__(self, col, nbytes):
        _BadValue.__init__(self, col, "...", "(and the others of this part) make %d bytes of text, more than the 2 GiB one column of one part can hold" % nbytes, 0)
        self.nbytes = nbytes



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
    if why.startswith("is a ") and getattr(col, "type", None) is not None:
        # Exasol's words after accelsql's (E-UDF-CL-SL-PYTHON-1094).
        why = "%s (emit column %r is of type %s but data given have type %s)" % (
            why, col.name, col.type.__name__, type(v).__name__)
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
        raise _bad(col, v, row, "is a %s, not a %s value" % (_type_name(v), col.decl))
    if isinstance(v, int):
        return int(v)
    dec = _need_decimal()
    if isinstance(v, dec.Decimal):
        if not v.is_finite():
            raise _bad(col, v, row, "is not a finite number and does not fit %s" % col.decl)
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
        raise _bad(col, v, row, "is a %s, not a %s value" % (_type_name(v), col.decl)) from None
    if f != f or f in (float("inf"), float("-inf")):
        raise _bad(col, v, row, "is not a finite number and does not fit %s" % col.decl)
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
                col.decl,
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
        raise _bad(col, v, row, "is a %s, not a %s value" % (_type_name(v), col.decl))
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        raise _bad(col, v, row, "is a %s, not a %s value" % (_type_name(v), col.decl))


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


_YM_TEXT = None
_DS_TEXT = None


def _interval_texts(col, vals):
    """An interval column's values as Exasol's text of them ('+05-03', '+02 10:20:30.500'):
    such strings (any sign and padding), and for DAY TO SECOND datetime.timedelta values."""
    global _YM_TEXT, _DS_TEXT
    import re

    if _YM_TEXT is None:
        _YM_TEXT = re.compile(r"^\s*([+-]?)\s*(\d+)-(\d+)\s*$")
        _DS_TEXT = re.compile(r"^\s*([+-]?)\s*(\d+)\s+(\d+):(\d+):(\d+)(?:\.(\d{1,9}))?\s*$")
    lead = col.precision or 2
    out = []
    for i, v in enumerate(vals):
        if v is None:
            out.append(None)
            continue
        if col.kind == T_INTERVAL_YM:
            m = _YM_TEXT.match(v) if isinstance(v, str) else None
            if m is None or int(m.group(3)) >= 12:
                raise _bad(col, v, i, "is not an %s value (write it as '+05-03')" % col.decl)
            sign, years, months = m.group(1) or "+", int(m.group(2)), int(m.group(3))
            if years == 0 and months == 0:
                sign = "+"
            if len(str(years)) > lead:
                raise _bad(col, v, i, "has more year digits than %s allows" % col.decl)
            out.append("%s%0*d-%02d" % (sign, lead, years, months))
            continue
        if isinstance(v, _dt.timedelta):
            micros = (v.days * 86400 + v.seconds) * 1000000 + v.microseconds
            sign = "-" if micros < 0 else "+"
            micros = abs(micros)
            days, rest = divmod(micros, 86400 * 1000000)
            secs, frac = divmod(rest, 1000000)
            nanos = frac * 1000
        else:
            m = _DS_TEXT.match(v) if isinstance(v, str) else None
            if m is None:
                raise _bad(col, v, i, "is not an %s value (write it as '+02 10:20:30.500', or return a datetime.timedelta)" % col.decl)
            h, mi, s = int(m.group(3)), int(m.group(4)), int(m.group(5))
            if h >= 24 or mi >= 60 or s >= 60:
                raise _bad(col, v, i, "is not an %s value (hours 0-23, minutes and seconds 0-59)" % col.decl)
            sign, days = m.group(1) or "+", int(m.group(2))
            secs = (h * 60 + mi) * 60 + s
            nanos = int((m.group(6) or "").ljust(9, "0") or 0)
            if days == 0 and secs == 0 and nanos == 0:
                sign = "+"
        if len(str(days)) > lead:
            raise _bad(col, v, i, "has more day digits than %s allows" % col.decl)
        text = "%s%0*d %02d:%02d:%02d" % (sign, lead, days, secs // 3600, secs // 60 % 60, secs % 60)
        frac_digits = col.scale if col.scale is not None else 3
        if frac_digits > 0:
            text += "." + ("%09d" % nanos)[:frac_digits]
        out.append(text)
    return out


def _enc_utf8(col, vals):
    if col.kind in (T_INTERVAL_YM, T_INTERVAL_DS):
        vals = _interval_texts(col, vals)
    types = set(map(type, vals))
    nulls = _NoneType in types
    if not types <= {str, _NoneType}:
        fixed = []
        for i, v in enumerate(vals):
            if v is None or isinstance(v, str):
                fixed.append(None if v is None else str(v))
            else:
                raise _bad(col, v, i, "is a %s, not a %s value" % (_type_name(v), col.decl))
        vals = fixed
    svals = ["" if v is None else v for v in vals] if nulls else vals
    limit = col.length
    if limit is not None and svals and max(map(len, svals)) > limit:
        for i, v in enumerate(svals):
            if len(v) > limit:
                raise _bad(col, v, i, "is %d characters long, longer than %s allows" % (len(v), col.decl))
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
        raise _TooMuchText(col, len(data))
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

