"""The ctx objects of run(ctx) and run_batch(ctx)."""

import sys

from . import state
from .chunks import fetch_rows, send_part
from .ctx_base import _RowContextBase, _no_column_message

# Generated functions are attributed to this file, so that tracebacks leave them out.
_THIS_FILE = (lambda: 0).__code__.co_filename

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


class _RowContext(_RowContextBase):
    """Exasol's ctx for run(ctx): the current row of the batch (SCALAR) or of the group (SET).

    The current row's values live in slots of the script's subclass (see _make_row_context_class),
    one per input column and named after it where the name can be an attribute, so that
    ctx.<column> is a plain slot read; the run loops and next()/reset() store them.
    """

    __slots__ = (
        "_cols", "_row", "_start", "_end", "_finished", "_df_done", "_out", "_it", "_n", "_df_row",
        "_base", "_total", "_part_rows",
    )
    # The slot of each input column (a list, so that ctx[i] out of range says "list index").
    _slot_names = []

    def __getitem__(self, key):
        if isinstance(key, str):
            idx = state.STATE.lower_names.get(key.lower())
            if idx is None:
                raise KeyError("E-UDF-CL-SL-PYTHON-1082: Column with name %r does not exist" % key)
            return getattr(self, self._slot_names[idx])
        try:
            return getattr(self, self._slot_names[key])
        except IndexError:
            raise IndexError(
                "E-UDF-CL-SL-PYTHON-1082: Column with index %r does not exist (there are %d input columns)"
                % (key, len(self._slot_names))
            ) from None

    def size(self):
        """Number of rows in the current group (SET), or in the current input chunk (SCALAR),
        as in Exasol."""
        if state.STATE.is_set:
            return self._total
        return self._n

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
        if self._base + self._end < self._total:
            return self._next_chunk()
        self._finished = True
        return False

    def reset(self):
        """SET scripts: back to the first row of the group."""
        if self._base != 0:
            self._take_chunk(0)
        self._row = self._start
        self._load(self._row)
        self._finished = False
        self._df_done = False
        return True

    def _take_chunk(self, from_row):
        """Makes the chunk of the group from row from_row the current one (its first row is
        row 0 of _cols)."""
        n, cols = fetch_rows(from_row)
        self._cols = cols
        self._base = from_row
        self._end = n

    def _next_chunk(self):
        """next() at the end of a chunk: the first row of the next one."""
        self._take_chunk(self._base + self._end)
        self._row = 0
        self._load(0)
        return True

    def _send_part(self):
        send_part(self._out)
        self._part_rows = state.RUN.part_rows

    def _load(self, row):
        """Stores the values of `row` in the column slots (generated per script)."""

    def emit(self, *values):
        """EMITS scripts: emits one output row (or a pandas DataFrame of rows)."""
        out = self._out
        if len(values) != len(out):
            if len(values) == 1 and _is_dataframe(values[0]):
                return _emit_dataframe(self, values[0])
            raise TypeError(
                "E-UDF-CL-SL-PYTHON-1089: emit() takes exactly %d argument%s (%d given): one per output column"
                % (len(out), "" if len(out) == 1 else "s", len(values))
            )
        if len(out) == 1:
            v = values[0]
            if _is_dataframe(v):
                return _emit_dataframe(self, v)
            col = out[0]
            col.append(v)
            if len(col) >= self._part_rows:
                self._send_part()
            return None
        for col, v in zip(out, values):
            col.append(v)
        if len(col) >= self._part_rows:
            self._send_part()
        return None

    def get_dataframe(self, num_rows=1, start_col=0):
        """The next num_rows rows (or 'all') from column start_col on, as a pandas DataFrame;
        None once the group is exhausted, an error after that."""
        if not (num_rows == "all" or (type(num_rows) is int and num_rows > 0)):
            raise ValueError(
                "get_dataframe() parameter 'num_rows' must be 'all' or an integer > 0, not %r" % (num_rows,)
            )
        ncols = len(self._cols)
        if type(start_col) is not int or start_col < 0:
            raise ValueError(
                "get_dataframe() parameter 'start_col' must be an integer >= 0, not %r" % (start_col,)
            )
        if start_col > ncols:
            raise ValueError(
                "get_dataframe() parameter 'start_col' is %d, but there are only %d input columns"
                % (start_col, ncols)
            )
        if self._df_done:
            raise RuntimeError("get_dataframe(): iteration finished (None was already returned); call ctx.reset() to start again")
        if self._finished:
            self._df_done = True
            return None
        pd = _pandas()
        want = None if num_rows == "all" else num_rows
        picked = [[] for _ in range(start_col, ncols)]
        row = self._row
        while True:
            end = self._end if want is None else min(self._end, row + want)
            for p, j in zip(picked, range(start_col, ncols)):
                p.extend(self._cols[j][row:end])
            if want is not None:
                want -= end - row
            if end < self._end:
                self._row = end
                break
            more = self._base + self._end < self._total
            if more and want != 0:
                # The rows go on in the next chunk.
                self._take_chunk(self._base + self._end)
                row = 0
                continue
            if more:
                self._take_chunk(self._base + self._end)
                self._row = 0
            else:
                self._finished = True
                self._row = self._end - 1
            break
        self._load(self._row)
        df = pd.DataFrame({i: p for i, p in enumerate(picked)})
        df.columns = [c.name for c in state.STATE.inputs[start_col:]]
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
        idx = state.STATE.lower_names.get(name.lower())
        if idx is None:
            raise AttributeError(_no_column_message(name))
        slot = self._slot_names[idx]
        if slot == name:  # an unset slot: never when run(ctx) is called
            raise AttributeError(name)
        return getattr(self, slot)


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
    st = state.STATE
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
        idx = state.STATE.lower_names.get(name.lower())
        if idx is None:
            raise AttributeError(
                "E-UDF-CL-SL-PYTHON-1085: Iterator has no object with name %r: ctx has no input column %r; the input columns are: %s"
                % (name, name, ", ".join(c.name for c in state.STATE.inputs) or "(none)")
            )
        return self._cols[idx]

    def __getitem__(self, key):
        if isinstance(key, str):
            idx = state.STATE.lower_names.get(key.lower())
            if idx is None:
                raise KeyError("E-UDF-CL-SL-PYTHON-1082: Column with name %r does not exist" % key)
            return self._cols[idx]
        return self._cols[key]

    def size(self):
        """Number of rows of this batch."""
        return self._n

    def get_dataframe(self, num_rows="all", start_col=0):
        """The whole batch from column start_col on, as a pandas DataFrame."""
        pd = _pandas()
        names = [c.name for c in state.STATE.inputs[start_col:]]
        df = pd.DataFrame({i: list(self._cols[j]) for i, j in enumerate(range(start_col, len(self._cols)))})
        df.columns = names
        return df

    next = _disallowed("next()", "run_batch(ctx) gets whole columns; there is no row iterator")
    reset = _disallowed("reset()", "run_batch(ctx) gets whole columns; there is no row iterator")
    emit = _disallowed("emit()", "run_batch(ctx) returns its output column")


def _emit_dataframe(ctx, df):
    out = ctx._out
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
    if len(out[0]) >= ctx._part_rows:
        ctx._send_part()


def _make_context_class(base, getter, reserved):
    ns = {"__slots__": ()}
    for i, c in enumerate(state.STATE.inputs):
        name = c.name
        if name.isidentifier() and name not in reserved and not name.startswith("_"):
            ns[name] = property(getter(i))
    return type("Context", (base,), ns)


def _generated(src, names):
    """Functions compiled from `src`, attributed to this file so that tracebacks leave them out."""
    g = {"zip": zip, "iter": iter, "range": range}
    exec(compile(src, _THIS_FILE, "exec"), g)
    return [g[n] for n in names]


def _make_row_context_class(code):
    """The ctx class of run(ctx) for this script (whose compiled module code is code), its run
    loop, and (EMITS scripts) the traced loop, which also notes after each row how many rows the
    run has emitted so far (for calls whose select list carries input columns beside them).

    Each input column gets a slot: its own name where that can be an attribute (an identifier, not
    a keyword, not a name of the ctx API, not starting with '_'), else _v<i>. The loop, generated
    for the script's columns, stores each row's values straight into the slots while it calls
    run(ctx): run(ctx, cols, n) -> the list of run's results (SCALAR RETURNS), or None.
    """
    import keyword

    st = state.STATE
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
        # The same loop noting, after each row, how many rows the run has emitted so far.
        traced = (
            "def traced(run, ctx, cols, n, ends, out0, sent):\n    " + head
            + "    for %s:\n        run(ctx)\n        ends.append(sent.sent + len(out0))\n" % each
        )
    else:
        body = "    return [run(ctx) for %s]\n" % each
        traced = "traced = None\n"
    loads = "".join("%sself.%s = cols[%d][row]\n" % ("{0}", s, i) for i, s in enumerate(slots))
    src = (
        "def loop(run, ctx, cols, n):\n    " + head + body + "\n" + traced + "\n"
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
        "    if self._base + self._end < self._total:\n"
        "        return self._next_chunk()\n"
        "    self._finished = True\n"
        "    return False\n"
    )
    loop, traced_loop, load, next_row = _generated(src, ["loop", "traced", "_load", "next"])
    next_row.__doc__ = _RowContext.next.__doc__
    ns = {"__slots__": tuple(slots), "_slot_names": slots, "_load": load, "next": next_row}
    if not st.is_set:
        why = (
            "F-UDF-CL-SL-PYTHON-1107: next(), reset() and emit() functions are not allowed in scalar "
            "context: it is a SCALAR script (one row per run); only SET scripts iterate over a group"
        )
        ns["next"] = _disallowed("next()", why)
        ns["reset"] = _disallowed("reset()", why)
        ns["get_dataframe"] = _RowContext._scalar_get_dataframe
    if not st.emits:
        ns["emit"] = _disallowed("emit()", "it RETURNS %s: return the value from run(ctx) instead" % st.outputs[0].decl)
    base = _RowContextWithFallback if _needs_attribute_fallback(code, slots) else _RowContext
    return type("Context", (base,), ns), loop, traced_loop


