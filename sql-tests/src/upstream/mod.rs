//! What upstream DataFusion's sqllogictest runner brings that accelsql's runner reuses: result
//! normalisation vendored from it (so that accelsql's results print exactly as upstream's `.slt`
//! files expect them), the fixtures it registers for particular files, and the list of records
//! whose result accelsql changes on purpose.
//!
//! Source: the `datafusion-sqllogictest` crate, version 55.2.0 (Apache License 2.0, © The Apache
//! Software Foundation; see `sql-tests/upstream/datafusion-55.2.0/LICENSE.txt` and `NOTICE.txt`).
//! Each file names the upstream file it comes from and what was changed. The crate itself is not a
//! dependency: it would pull in avro and datafusion-spark.

pub mod conversion;
pub mod differences;
pub mod fixtures;
pub mod normalize;
pub mod output;
pub mod validator;
