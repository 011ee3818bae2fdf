"""The worker's main loop: HELLO, INIT -> READY, RUN -> RESULT, FINISH -> DONE."""

import os
import sys

from . import state
from .chunks import _Run, _RunAborted, fetch_raw, read_chunk, send_part
from .context import _BatchContext, _batch_getter, _make_context_class, _make_row_context_class
from .errors import _send_bad_value, _send_exception, _send_single_call_error
from .exa import _make_exa, _read_column, late_globals, preset_globals
from .single_call import SingleCallError, check_result, function_of, read_call
from .values import _BadValue, _TooMuchText, _decode_raw, _pack, _encode_result, _numpy, _to_list, _to_numpy, _to_row_values, _type_name
from .wire import (
    F_DONE,
    F_FINISH,
    F_HELLO,
    F_INIT,
    F_READY,
    F_RESULT,
    F_ROW_ENDS,
    F_RUN,
    F_SINGLE_CALL,
    F_SINGLE_RESULT,
    MODE_SINGLE_CALL,
    PROTOCOL_VERSION,
    RUN_TRACE_ROWS,
    _Channel,
    _EngineGone,
    _ProtocolError,
    _Reader,
    _U64,
    _s,
)


class _State(object):
    """What INIT said: the script, its call's exa.meta values and its columns."""


def _read_init(payload):
    st = _State()
    r = _Reader(payload)
    version = r.u32()
    if version != PROTOCOL_VERSION:
        raise _ProtocolError("INIT of protocol version %d; this worker speaks %d" % (version, PROTOCOL_VERSION))
    st.single_call = r.u8() == MODE_SINGLE_CALL
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
    st.current_user = r.str()
    st.scope_user = r.str()
    has_schema = r.u8() == 1
    schema = r.str()
    st.current_schema = schema if has_schema else None
    st.memory_limit = r.u64()
    st.emit_rows = r.u64()
    st.emit_bytes = r.u64()
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


def _run(st, payload, run, run_batch, ctx_cls, batch_cls):
    """One run: RUN's first chunk, later chunks as the run asks for them (FETCH), output parts
    as they fill (EMIT). Returns the last part: (rows, one list per output column)."""
    r = _Reader(payload)
    total = r.u64()
    flags = r.u8()
    n, raws = read_chunk(r, st)
    run_state = _Run(total)
    state.RUN = run_state
    if run_batch is not None:
        return _run_batches(st, run_batch, batch_cls, total, n, raws)

    ctx_cls, loop, traced = ctx_cls
    ends = None
    if flags & RUN_TRACE_ROWS and traced is not None and not st.is_set:
        ends = []
    ctx = object.__new__(ctx_cls)
    ctx._finished = False
    ctx._df_done = False
    ctx._df_row = -1
    ctx._part_rows = run_state.part_rows
    out = [[] for _ in st.outputs]
    ctx._out = out
    if st.is_set:
        if total == 0:
            return (0, out) if st.emits else (1, [[None]])
        ctx._cols = [_to_row_values(n, c, *raw) for c, raw in zip(st.inputs, raws)]
        ctx._total = total
        ctx._base = 0
        ctx._row = 0
        ctx._start = 0
        ctx._end = n
        ctx._load(0)
        value = run(ctx)
        if st.emits:
            return len(out[0]) if out else 0, out
        return 1, [[value]]
    # SCALAR: each chunk's rows one by one; a RETURNS script's values go back chunk by chunk.
    ctx._total = 1
    ctx._base = 0
    done = 0
    while True:
        cols = [_to_row_values(n, c, *raw) for c, raw in zip(st.inputs, raws)]
        ctx._cols = cols
        ctx._row = ctx._start = 0
        ctx._end = 1
        ctx._n = n
        ctx._df_row = -1
        if ends is None:
            res = loop(run, ctx, cols, n)
        else:
            traced(run, ctx, cols, n, ends, out[0], run_state)
        done += n
        if done >= total:
            break
        if not st.emits:
            send_part([res])
        n, raws = fetch_raw(done)
    if ends is not None:
        state.CHANNEL.write(F_ROW_ENDS, [_U64.pack(len(ends)), _pack("Q", ends).tobytes()])
    if st.emits:
        return len(out[0]) if out else 0, out
    return n, [res]


def _run_batches(st, run_batch, batch_cls, total, n, raws):
    """run_batch(ctx) once per chunk; each chunk's column goes back as a part."""
    np = _numpy()
    done = 0
    while True:
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
        done += n
        if done >= total:
            return n, [result]
        send_part([result])
        n, raws = fetch_raw(done)


def _finish(ch, g, payload_read=False):
    """Waits for FINISH (unless it was read), calls cleanup() and says DONE."""
    if not payload_read:
        kind, _ = ch.read()
        if kind != F_FINISH:
            raise _ProtocolError("expected FINISH, got frame %d" % kind)
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


def _single_call(ch):
    """Answers the one SINGLE_CALL of a single-call worker: the function's str, or an error."""
    kind, payload = ch.read()
    if kind != F_SINGLE_CALL:
        raise _ProtocolError("expected SINGLE_CALL, got frame %d" % kind)
    g = sys.modules["accelsql_script"].__dict__
    function, phase, args = read_call(payload)
    try:
        f = function_of(g, function)
    except SingleCallError as e:
        _send_single_call_error(ch, e.function, e.message)
        return
    try:
        result = f(*args)
    except BaseException as e:
        _send_exception(ch, e, phase)
        return
    try:
        text = check_result(function, result)
    except SingleCallError as e:
        _send_single_call_error(ch, e.function, e.message)
        return
    ch.write(F_SINGLE_RESULT, [_s(text)])


def main():
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
    state.forget_worker_dir()
    ch = _Channel(proto)
    state.CHANNEL = ch
    impl = sys.implementation.name
    ch.write(F_HELLO, [_s("%s %s (%s)" % (impl, sys.version.split()[0], sys.executable))])
    try:
        kind, payload = ch.read()
        if kind != F_INIT:
            raise _ProtocolError("expected INIT, got frame %d" % kind)
        st = _read_init(payload)
        state.STATE = st
        import types

        module = types.ModuleType("accelsql_script")
        g = module.__dict__
        preset_globals(g, _make_exa(st))
        sys.modules["accelsql_script"] = module
        try:
            code = compile(st.body, st.filename, "exec")
            exec(code, g)
            late_globals(g)
            run = g.get("run")
            run_batch = g.get("run_batch") if (not st.is_set and not st.emits) else None
            if run_batch is not None and not callable(run_batch):
                run_batch = None
            if run_batch is None and not callable(run) and not st.single_call:
                raise NameError("F-UDF-CL-SL-PYTHON-1110: function 'run' is not defined: the script defines no run(ctx) function%s" % (
                    "" if (st.is_set or st.emits) else " (nor run_batch(ctx))"))
        except BaseException as e:  # module-level code of the user
            _send_exception(ch, e, "start")
            return
        if st.single_call:
            ch.write(F_READY, [bytes((0, 1 if callable(g.get("cleanup")) else 0))])
            _single_call(ch)
            _finish(ch, g)
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
                except (_ProtocolError, _EngineGone):
                    raise
                except _RunAborted:
                    continue
                except BaseException as e:
                    _send_exception(ch, e, "run")
                    continue
                try:
                    while True:
                        try:
                            parts = _encode_result(st, nrows, out)
                            break
                        except _TooMuchText:
                            if nrows == 1:
                                raise
                            # More than 2 GiB of text in a column: the first half goes ahead
                            # as EMIT parts (split further as needed), the rest is the RESULT.
                            half = nrows // 2
                            send_part([col[:half] for col in out])
                            out = [col[half:] for col in out]
                            nrows -= half
                except _RunAborted:
                    continue
                except _TooMuchText as bad:
                    why = "is %d bytes of text, more than the 2 GiB one value can hold" % bad.nbytes
                    _send_bad_value(ch, _BadValue(bad.col, "...", why, state.RUN.sent))
                    continue
                except _BadValue as bad:
                    bad.row += state.RUN.sent
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
                _finish(ch, g, payload_read=True)
                return
            else:
                raise _ProtocolError("unexpected frame %d" % kind)
    except _EngineGone:
        return
    except _ProtocolError as e:
        sys.stderr.write("accelsql worker: protocol error: %s\n" % e)
        os._exit(70)

