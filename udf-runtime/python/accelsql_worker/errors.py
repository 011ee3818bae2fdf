"""How an exception or a bad output value of the script is reported to the engine."""

from . import state
from .ctx_base import _RowContextBase, _no_column_message
from .values import _short_repr
from .wire import _U32, _U64, E_BAD_OUTPUT, E_EXCEPTION, E_SINGLE_CALL, F_ERROR, _s

def _exception_text(exc):
    """(line in the script or 0, traceback text without worker frames)."""
    import linecache
    import traceback

    fname = state.STATE.filename if state.STATE else None
    if fname and state.STATE.body is not None and fname not in linecache.cache:
        lines = state.STATE.body.splitlines(True)
        linecache.cache[fname] = (len(state.STATE.body), None, lines, fname)
    line = 0
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == fname:
            line = lineno
    if isinstance(exc, SyntaxError) and exc.filename == fname and exc.lineno:
        line = exc.lineno
    worker_files = state.worker_files()
    te = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    seen = set()
    stack = [te]
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        kept = [f for f in t.stack if f.filename not in worker_files]
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
        and isinstance(getattr(exc, "obj", None), _RowContextBase)
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
            _s(bad.col.decl),
            _s(_short_repr(bad.value)),
            _s(bad.message),
            _U64.pack(bad.row),
        ],
    )



def _send_single_call_error(ch, function, message):
    ch.write(F_ERROR, [bytes((E_SINGLE_CALL,)), _s(function), _s(message)])
