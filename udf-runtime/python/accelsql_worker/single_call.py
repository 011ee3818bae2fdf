"""Single calls (Exasol's singleCall): default_output_columns(), generate_sql_for_import_spec(spec)
and generate_sql_for_export_spec(spec), each called once; their spec objects."""

from .exa import _read_connection
from .wire import _Reader, _ProtocolError

# The function codes of a SINGLE_CALL frame (wire.rs: encode_single_call).
_FUNCTIONS = {1: "default_output_columns", 2: "generate_sql_for_import_spec", 3: "generate_sql_for_export_spec"}
_ARGUMENT = {2: "import_spec", 3: "export_spec"}

_NO_DEFAULT_OUTPUT_COLUMNS = (
    "The script has dynamic return arguments. Either specify the return arguments in the query via EMITS "
    "or implement the method default_output_columns in the UDF."
)


class SingleCallError(Exception):
    """The function is missing or returned no usable str (reported as 42U18, not as an exception
    of the script)."""

    def __init__(self, function, message):
        Exception.__init__(self, message)
        self.function = function
        self.message = message


class _Spec(object):
    """import_spec / export_spec: attributes that also read as spec[key]."""

    def __getitem__(self, key):
        try:
            return self.__dict__[key]
        except (KeyError, TypeError):
            raise KeyError(key) from None

    def __contains__(self, key):
        return key in self.__dict__

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%r" % kv for kv in sorted(self.__dict__.items())))


class ImportSpecification(_Spec):
    """The import_spec of generate_sql_for_import_spec."""


class ExportSpecification(_Spec):
    """The export_spec of generate_sql_for_export_spec."""


def _read_connection_part(r, spec):
    spec.parameters = dict((r.str(), r.str()) for _ in range(r.u32()))
    spec.connection_name = r.opt_str()
    spec.connection = _read_connection(r) if r.u8() else None


def read_call(payload):
    """A SINGLE_CALL payload -> (function name, phase text, arguments)."""
    r = _Reader(payload)
    code = r.u8()
    if code not in _FUNCTIONS:
        raise _ProtocolError("unknown single call %d" % code)
    function = _FUNCTIONS[code]
    if code == 1:
        return function, "%s()" % function, ()
    if code == 2:
        spec = ImportSpecification()
        spec.is_subselect = r.u8() == 1
        spec.subselect_column_names = r.opt_list()
        spec.subselect_column_types = r.opt_list()
        _read_connection_part(r, spec)
    else:
        spec = ExportSpecification()
        _read_connection_part(r, spec)
        spec.has_truncate = r.u8() == 1
        spec.has_replace = r.u8() == 1
        spec.created_by = r.opt_str()
        spec.source_column_names = r.opt_list()
    return function, "%s(%s)" % (function, _ARGUMENT[code]), (spec,)


def function_of(g, function):
    """The script's function (its globals g), or SingleCallError when it defines none."""
    f = g.get(function)
    if callable(f):
        return f
    if function == "default_output_columns":
        raise SingleCallError(function, _NO_DEFAULT_OUTPUT_COLUMNS)
    raise SingleCallError(function, "the script defines no %s function, which this call needs" % function)


def check_result(function, result):
    """The str the function returned, or SingleCallError."""
    if not isinstance(result, str):
        raise SingleCallError(
            function, "%s did not return string type (singleCall): it returned %s" % (function, type(result).__name__)
        )
    if function == "default_output_columns" and not result.strip():
        raise SingleCallError(function, "Empty default output columns")
    return result
