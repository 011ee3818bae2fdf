//! Names as Exasol shows them: accelsql keeps unquoted identifiers in lower case (DataFusion's
//! rule), Exasol in upper case; system tables, `exa.meta` and generated SQL show Exasol's.

/// A name as Exasol shows a name it folded: accelsql keeps unquoted names in lower case, so an
/// all-lower-case name is shown in upper case, any other as it is.
pub(crate) fn exasol_name(name: &str) -> String {
    if name.chars().any(|c| c.is_uppercase()) {
        name.to_string()
    } else {
        name.to_uppercase()
    }
}
