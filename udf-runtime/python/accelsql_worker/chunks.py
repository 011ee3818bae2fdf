"""A run in chunks: rows past the first chunk (FETCH -> ROWS) and output in parts (EMIT)."""

from . import state
from .errors import _send_bad_value, _send_exception
from .values import _BadValue, _TooMuchText, _decode_raw, _encode_result, _to_row_values
from .wire import F_EMIT, F_FETCH, F_ROWS, _U64, _ProtocolError

# Bounds of the adaptive number of emitted rows per EMIT part.
_MIN_PART_ROWS = 16
_MAX_PART_ROWS = 1 << 16


class _RunAborted(BaseException):
    """The run failed outside the script's code (an emitted value was refused while a part was
    sent): the ERROR frame is sent already. A BaseException, so that the script's own
    `except Exception` does not swallow it."""


class _Run(object):
    """The current run: its row count, and the output rows sent so far in EMIT parts."""

    __slots__ = ("total", "sent", "part_rows")

    def __init__(self, total):
        self.total = total
        self.sent = 0
        self.part_rows = state.STATE.emit_rows


def read_chunk(r, st):
    """`u64 rows | u32 columns | columns…` -> (rows, raw columns)."""
    n = r.u64()
    ncols = r.u32()
    if ncols != len(st.inputs):
        raise _ProtocolError("chunk has %d columns, the script has %d inputs" % (ncols, len(st.inputs)))
    return n, [_decode_raw(r, n, c) for c in st.inputs]


def fetch_raw(from_row):
    """The chunk of the current run from row `from_row` on: (rows, raw columns)."""
    st = state.STATE
    r = state.CHANNEL.request(F_FETCH, [_U64.pack(from_row)], F_ROWS)
    start = r.u64()
    if start != from_row:
        raise _ProtocolError("ROWS from row %d, asked for %d" % (start, from_row))
    n, raws = read_chunk(r, st)
    if n == 0:
        raise _ProtocolError("no rows from row %d of a run of %d" % (from_row, state.RUN.total))
    return n, raws


def fetch_rows(from_row):
    """Like fetch_raw, with the columns as run(ctx) reads them."""
    st = state.STATE
    n, raws = fetch_raw(from_row)
    return n, [_to_row_values(n, c, *raw) for c, raw in zip(st.inputs, raws)]


def send_part(out):
    """Sends the rows in `out` (one list per output column) as an EMIT part and empties them.
    A value that does not fit its column fails the run (ERROR sent, _RunAborted raised)."""
    n = len(out[0])
    if n == 0:
        return
    st = state.STATE
    run = state.RUN
    ch = state.CHANNEL
    try:
        parts = _encode_result(st, n, out)
    except _TooMuchText as bad:
        if n == 1:
            why = "is %d bytes of text, more than the 2 GiB one value can hold" % bad.nbytes
            _send_bad_value(ch, _BadValue(bad.col, "...", why, run.sent))
            raise _RunAborted()
        # More than 2 GiB of text in a column: the rows go in two smaller parts (the engine
        # puts them together as one large column, and emits them as several batches).
        half = n // 2
        first = [col[:half] for col in out]
        rest = [col[half:] for col in out]
        for col in out:
            del col[:]
        send_part(first)
        send_part(rest)
        return
    except _BadValue as bad:
        bad.row += run.sent
        _send_bad_value(ch, bad)
        raise _RunAborted()
    except _ProtocolError:
        raise
    except Exception as e:  # e.g. a value whose __float__ raises
        _send_exception(ch, e, "run")
        raise _RunAborted()
    ch.write(F_EMIT, parts)
    run.sent += n
    size = 0
    for p in parts:
        size += len(p) if type(p) is bytes else memoryview(p).nbytes
    # The next part: about emit_bytes at this part's bytes per row.
    rows = n * st.emit_bytes // max(size, 1)
    run.part_rows = max(_MIN_PART_ROWS, min(_MAX_PART_ROWS, rows))
    for col in out:
        del col[:]
