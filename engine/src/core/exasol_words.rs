//! The one table of Exasol's words in accelsql's errors: for each failure whose message users'
//! tests and `except` clauses match (`assertRaisesRegex`), accelsql's code in brackets, then a
//! message holding Exasol's words, so that a pattern written against Exasol matches it. The
//! messages are made where the failure is found (the planner, the script DDL, the Python
//! worker); this table lists them, and `docs/src/exasol-errors.md` shows it (a test keeps the
//! two the same).

/// One failure: what happens, accelsql's code, and the words of Exasol's message it carries.
#[derive(Debug, Clone, Copy)]
pub struct ExasolWords {
    /// The failure, as a user meets it.
    pub situation: &'static str,
    /// accelsql's code, in brackets at the start of the message.
    pub code: &'static str,
    /// Exasol's words, as they appear in the message.
    pub words: &'static str,
}

/// Every failure whose message carries Exasol's words.
pub const EXASOL_WORDS: &[ExasolWords] = &[
    ExasolWords {
        situation: "EMITS (…) at the call of a script that RETURNS or has its own EMITS list",
        code: "42E03",
        words: "The script has a static return argument definition. Dynamic return arguments are not supported in this case",
    },
    ExasolWords {
        situation: "EMITS (…) in INSERT … SELECT",
        code: "42E03",
        words: "The return arguments for EMITS functions are inferred from the table to insert into. Specification of EMITS is not allowed in this case.",
    },
    ExasolWords {
        situation: "EMITS (…) at the call of a built-in function",
        code: "42E03",
        words: "emits specification is not allowed for built-in functions",
    },
    ExasolWords {
        situation: "an EMITS (...) script called without EMITS and without default_output_columns()",
        code: "42E03",
        words: "The script has dynamic return arguments. Either specify the return arguments in the query via EMITS or implement the method default_output_columns in the UDF.",
    },
    ExasolWords {
        situation: "an empty EMITS () list",
        code: "42E03",
        words: "Empty return argument definition is not allowed",
    },
    ExasolWords {
        situation: "an EMITS list that does not parse (EMITS (a), EMITS (int))",
        code: "42E03",
        words: "syntax error",
    },
    ExasolWords {
        situation: "a column named twice in an EMITS list",
        code: "42E03",
        words: "Return argument A is declared more than once",
    },
    ExasolWords {
        situation: "default_output_columns() returns ''",
        code: "42U18",
        words: "Empty default output columns",
    },
    ExasolWords {
        situation: "an EMITS call inside an expression or a function's arguments",
        code: "42E02",
        words: "emitting function in expression",
    },
    ExasolWords {
        situation: "a SET call inside another SET call, or inside a SCALAR EMITS call",
        code: "42000",
        words: "encapsulated set function",
    },
    ExasolWords {
        situation: "a variadic SET script called without arguments",
        code: "42000",
        words: "data exception - missing input parameters for SET UDF script",
    },
    ExasolWords {
        situation: "a %env option line without its ';', or without NAME=value",
        code: "42E03",
        words: "Error while parsing %env option line",
    },
    ExasolWords {
        situation: "calling a script without EXECUTE on it",
        code: "42501",
        words: "insufficient privileges for calling script",
    },
    ExasolWords {
        situation: "exa.get_connection(name) of a connection the script may not read",
        code: "22U10",
        words: "insufficient privileges for using connection C in script S",
    },
    ExasolWords {
        situation: "exa.get_connection(name) of a connection that does not exist",
        code: "22U10",
        words: "connection FOO does not exist",
    },
    ExasolWords {
        situation: "an exception in run(ctx)",
        code: "22U10",
        words: "VM error: F-UDF-CL-SL-PYTHON-1114: Exception during run",
    },
    ExasolWords {
        situation: "an exception in cleanup()",
        code: "22U10",
        words: "VM error: Exception during cleanup",
    },
    ExasolWords {
        situation: "a script without run(ctx)",
        code: "22U10",
        words: "F-UDF-CL-SL-PYTHON-1110: function 'run' is not defined",
    },
    ExasolWords {
        situation: "next(), reset() or emit() in a SCALAR script (emit() in one that RETURNS)",
        code: "22U10",
        words: "F-UDF-CL-SL-PYTHON-1107: next(), reset() and emit() functions are not allowed in scalar context",
    },
    ExasolWords {
        situation: "emit() with as many values as the output has not columns",
        code: "22U10",
        words: "E-UDF-CL-SL-PYTHON-1089: emit() takes exactly N arguments (M given)",
    },
    ExasolWords {
        situation: "ctx.name of a column the script does not have",
        code: "22U10",
        words: "E-UDF-CL-SL-PYTHON-1085: Iterator has no object with name 'name'",
    },
    ExasolWords {
        situation: "ctx['name'] or ctx[i] of a column the script does not have",
        code: "22U10",
        words: "E-UDF-CL-SL-PYTHON-1082: Column with name 'name' does not exist",
    },
    ExasolWords {
        situation: "a value emitted or returned that does not fit its column's type",
        code: "22U13",
        words: "emit column 'c' is of type float but data given have type str",
    },
    ExasolWords {
        situation: "get_dataframe() with a bad num_rows or start_col",
        code: "22U10",
        words: "get_dataframe() parameter 'start_col' must be an integer >= 0",
    },
];

#[cfg(test)]
mod tests {
    use super::EXASOL_WORDS;

    /// The docs' table lists every row of the code's, with the same code and words.
    #[test]
    fn the_docs_list_the_same_table() {
        let docs = include_str!("../../../docs/src/exasol-errors.md");
        for row in EXASOL_WORDS {
            let line = format!(
                "| {} | {} | `{}` |",
                row.situation.replace('|', "\\|"),
                row.code,
                row.words
            );
            assert!(
                docs.contains(&line),
                "docs/src/exasol-errors.md lacks:\n{line}"
            );
        }
    }
}
