//! Result normalisation vendored from Apache DataFusion's sqllogictest driver, so that accelsql's
//! results print exactly as upstream's `.slt` files expect them.
//!
//! Source: the `datafusion-sqllogictest` crate, version 55.2.0 (Apache License 2.0, © The Apache
//! Software Foundation; see `sql-tests/upstream/datafusion-55.2.0/LICENSE.txt` and `NOTICE.txt`).
//! Each file names the upstream file it comes from and what was changed. The crate itself is not a
//! dependency: it would pull in parquet, avro and datafusion-spark.

pub mod conversion;
pub mod normalize;
pub mod output;
pub mod validator;
