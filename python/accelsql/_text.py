"""Placeholders in SQL text: what scanners skip (string literals, quoted names, comments), and
the package's own binding of ``?`` and pyexasol's ``{name}`` to the engine's ``$1``, ``$2``, …"""

import decimal
import re
from typing import Any, Mapping, Optional, Sequence, Tuple, Union

#: A plain (unquoted) SQL name.
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def literal_end(sql: str, i: int) -> Optional[int]:
    """Where the string literal (``'it''s'``), quoted name (``"a"``) or comment (``-- …``,
    ``/* … */``) starting at ``i`` ends (one past it; the text's end when it is not closed), or
    None when none starts there."""
    n = len(sql)
    c = sql[i]
    if c in "'\"":
        end = i + 1
        while end < n:
            if sql[end] == c:
                if end + 1 < n and sql[end + 1] == c:
                    end += 2
                    continue
                return end + 1
            end += 1
        return n
    if sql.startswith("--", i):
        end = sql.find("\n", i)
        return n if end < 0 else end
    if sql.startswith("/*", i):
        end = sql.find("*/", i + 2)
        return n if end < 0 else end + 2
    return None


def bind(sql: str, params: Union[Sequence[Any], Mapping[str, Any]]) -> Tuple[str, list]:
    """``sql`` with its ``?`` (for a sequence) or ``{name}`` (for a mapping) placeholders turned
    into ``$1``, ``$2``, … and the values in that order. String literals, quoted identifiers and
    comments are left alone."""
    named = isinstance(params, Mapping)
    if not named and (isinstance(params, (str, bytes)) or not isinstance(params, Sequence)):
        raise TypeError("params must be a sequence (for ? placeholders) or a mapping (for {name})")
    out: list = []
    values: list = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        end = literal_end(sql, i)
        if end is not None:
            out.append(sql[i:end])
            i = end
        elif c == "?" and not named:
            if len(values) >= len(params):
                raise ValueError(f"the statement has more ? placeholders than the {len(params)} params given")
            values.append(params[len(values)])
            out.append(f"${len(values)}")
            i += 1
        elif named and sql.startswith("{{", i):
            out.append("{")
            i += 2
        elif named and sql.startswith("}}", i):
            out.append("}")
            i += 2
        elif named and c == "{":
            end = sql.find("}", i)
            if end < 0:
                raise ValueError(f"unclosed placeholder at {sql[i:i + 20]!r}")
            name, _, conversion = sql[i + 1 : end].partition("!")
            if name not in params:
                raise KeyError(f"placeholder {{{name}}} has no value in params")
            value = params[name]
            if conversion in ("i", "q"):
                text = str(value)
                if conversion == "i" and not NAME.match(text):
                    raise ValueError(f"{{{name}!i}}: {text!r} is not a plain identifier")
                out.append(text if conversion == "i" else '"' + text.replace('"', '""') + '"')
            elif conversion in ("", "s", "d", "f"):
                if conversion in ("d", "f") and (isinstance(value, bool) or not isinstance(value, (int, float, decimal.Decimal))):
                    raise ValueError(f"{{{name}!{conversion}}}: {value!r} is not a number")
                values.append(value)
                out.append(f"${len(values)}")
            else:
                raise ValueError(
                    f"{{{name}!{conversion}}}: accelsql binds values and identifiers only (no raw text)"
                )
            i = end + 1
        else:
            out.append(c)
            i += 1
    if not named and len(values) != len(params):
        raise ValueError(f"{len(params)} params given for {len(values)} ? placeholders")
    return "".join(out), values
