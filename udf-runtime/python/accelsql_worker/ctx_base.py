"""What errors.py needs to know of run(ctx)'s ctx: the base of its classes and the message for a
missing input column (context.py, which defines ctx, reaches errors.py through chunks.py)."""

from . import state


class _RowContextBase(object):
    """The base of _RowContext (context.py), by which an error report recognises a run(ctx) ctx.
    It has no attributes of its own, so ctx offers what it did without it."""

    __slots__ = ()


def _no_column_message(name):
    return "E-UDF-CL-SL-PYTHON-1085: Iterator has no object with name %r: ctx has no input column %r; the input columns are: %s" % (
        name,
        name,
        ", ".join(c.name for c in state.STATE.inputs) or "(none)",
    )
