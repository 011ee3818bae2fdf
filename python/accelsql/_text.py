"""What placeholder scanners skip in SQL text: string literals, quoted names and comments."""

from typing import Optional


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
