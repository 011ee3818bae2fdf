//! `accelsql._accelsql`: the native half of the `accelsql` Python package (connections on a
//! shared in-process engine, Arrow results through the C stream interface, Python callables as
//! UDFs). The public API is the Python layer in `python/accelsql/`.

mod callable;
mod connection;
mod context;
mod error;
mod process;
mod types;

use pyo3::prelude::*;

/// The extension module. `gil_used`: Python callables run as UDFs are not written for
/// free-threaded Python, and an abi3 build is never loaded by one.
#[pymodule(gil_used = true)]
fn _accelsql(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<connection::NativeConnection>()?;
    m.add_class::<context::UdfContext>()?;
    m.add("AccelsqlError", m.py().get_type::<error::AccelsqlError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
