//! Scripts as UDFs (`CREATE <LANG> SCALAR|SET SCRIPT … AS <body> /`): what a stored script is
//! (`definition`), its `%options` (`options`), how SQL names scripts (`names`), what a running
//! script reaches (`links`), what travels with its call to a cluster's nodes (`origin`), and the
//! UDF that runs it in worker processes (`udf`). The DDL that creates scripts is the front end's
//! (`front/scripts/`); the catalog that keeps them is `catalog/scripts.rs`.

pub(crate) mod definition;
pub(crate) mod links;
pub(crate) mod names;
pub(crate) mod options;
pub(crate) mod origin;
pub(crate) mod udf;
