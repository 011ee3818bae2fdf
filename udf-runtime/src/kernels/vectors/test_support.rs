//! Test helpers shared by the vector kernels' tests: list arrays from nested options.

use arrow::array::ListArray;
use arrow::datatypes::Float64Type;

pub(super) type Rows = Vec<Option<Vec<Option<f64>>>>;

pub(super) fn list(rows: Rows) -> ListArray {
    ListArray::from_iter_primitive::<Float64Type, _, _>(rows)
}

pub(super) fn some(v: &[f64]) -> Option<Vec<Option<f64>>> {
    Some(v.iter().copied().map(Some).collect())
}

pub(super) fn close(got: Option<f64>, want: f64) -> bool {
    got.is_some_and(|g| (g - want).abs() <= 1e-12 * want.abs().max(1.0))
}
