//! Great-circle distance on the WGS-84 mean Earth radius (haversine formula).

use arrow::array::{Array, Float64Array};

use super::{Operand, map_f64_rows};

/// Mean Earth radius in kilometres (IUGG), the radius `haversine_km` uses.
pub const EARTH_RADIUS_KM: f64 = 6371.0088;

/// Great-circle distance in km between two points given in degrees.
pub fn haversine_km_value(lat1: f64, lon1: f64, lat2: f64, lon2: f64) -> f64 {
    let (p1, p2) = (lat1.to_radians(), lat2.to_radians());
    let dp = p2 - p1;
    let dl = (lon2 - lon1).to_radians();
    let a = (dp / 2.0).sin().powi(2) + p1.cos() * p2.cos() * (dl / 2.0).sin().powi(2);
    2.0 * EARTH_RADIUS_KM * a.sqrt().min(1.0).asin()
}

/// Row-wise [`haversine_km_value`]; a NULL in any input gives NULL. All arrays must have the
/// same length (the caller replicates scalar arguments).
pub fn haversine_km(
    lat1: &Float64Array,
    lon1: &Float64Array,
    lat2: &Float64Array,
    lon2: &Float64Array,
) -> Float64Array {
    (0..lat1.len())
        .map(|i| {
            let valid = !(lat1.is_null(i) || lon1.is_null(i) || lat2.is_null(i) || lon2.is_null(i));
            valid.then(|| {
                haversine_km_value(lat1.value(i), lon1.value(i), lat2.value(i), lon2.value(i))
            })
        })
        .collect()
}

/// Row-wise [`haversine_km_value`] over DOUBLE operands (columns, or scalars that hold for every
/// row and are not replicated): the CPU kernel of `haversine_km`. A NULL in any input gives NULL.
///
/// Fails with [`crate::RuntimeError::InvalidArgument`] if an argument is not DOUBLE or does not
/// fit `rows`.
pub fn haversine_km_operands(rows: usize, args: &[Operand; 4]) -> crate::Result<Float64Array> {
    map_f64_rows("haversine_km", rows, args, |[lat1, lon1, lat2, lon2]| {
        Some(haversine_km_value(lat1, lon1, lat2, lon2))
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array};

    use super::*;

    #[test]
    fn known_distances() {
        // Paris – London ≈ 343.6 km; a point to itself is 0; antipodes are half the circumference.
        let d = haversine_km_value(48.8566, 2.3522, 51.5074, -0.1278);
        assert!((d - 343.6).abs() < 1.0, "{d}");
        assert_eq!(haversine_km_value(10.0, 20.0, 10.0, 20.0), 0.0);
        let half = haversine_km_value(0.0, 0.0, 0.0, 180.0);
        assert!(
            (half - std::f64::consts::PI * EARTH_RADIUS_KM).abs() < 1e-6,
            "{half}"
        );
    }

    #[test]
    fn nulls_propagate() {
        let a = Float64Array::from(vec![Some(0.0), None]);
        let b = Float64Array::from(vec![Some(0.0), Some(0.0)]);
        let out = haversine_km(&a, &b, &b, &b);
        assert_eq!(out.len(), 2);
        assert_eq!(out.value(0), 0.0);
        assert!(out.is_null(1));
    }

    fn column(values: Vec<Option<f64>>) -> Operand {
        Operand::Column(Arc::new(Float64Array::from(values)))
    }

    fn scalar(value: Option<f64>) -> Operand {
        Operand::Scalar(Arc::new(Float64Array::from(vec![value])))
    }

    #[test]
    fn operands_take_scalars_without_replicating_them() {
        let paris = [48.8566, 2.3522];
        let out = haversine_km_operands(
            3,
            &[
                column(vec![Some(51.5074), None, Some(paris[0])]),
                column(vec![Some(-0.1278), Some(0.0), Some(paris[1])]),
                scalar(Some(paris[0])),
                scalar(Some(paris[1])),
            ],
        )
        .unwrap();
        assert_eq!(out.len(), 3);
        assert!((out.value(0) - 343.6).abs() < 1.0, "{}", out.value(0));
        assert!(out.is_null(1));
        assert_eq!(out.value(2), 0.0);
        assert_eq!(out.null_count(), 1);
    }

    #[test]
    fn operands_match_the_column_kernel_on_sliced_arrays() {
        let lat: Float64Array = (0..20).map(|i| Some(i as f64 * 4.0 - 40.0)).collect();
        let lon: Float64Array = (0..20)
            .map(|i| (i % 7 != 3).then_some(i as f64 * 9.0 - 90.0))
            .collect();
        let (lat, lon) = (lat.slice(5, 10), lon.slice(3, 10));
        let expected = haversine_km(&lat, &lon, &lon, &lat);
        let ops = [
            Operand::Column(Arc::new(lat.clone())),
            Operand::Column(Arc::new(lon.clone())),
            Operand::Column(Arc::new(lon)),
            Operand::Column(Arc::new(lat)),
        ];
        assert_eq!(haversine_km_operands(10, &ops).unwrap(), expected);
    }

    #[test]
    fn operands_edge_cases() {
        // An empty batch, a NULL scalar (every row NULL), a one-row batch of scalars.
        let empty = || column(Vec::new());
        let out = haversine_km_operands(0, &[empty(), empty(), scalar(Some(1.0)), empty()]);
        assert_eq!(out.unwrap().len(), 0);
        let out = haversine_km_operands(
            2,
            &[
                column(vec![Some(1.0), Some(2.0)]),
                scalar(None),
                scalar(Some(1.0)),
                scalar(Some(1.0)),
            ],
        )
        .unwrap();
        assert_eq!(out.null_count(), 2);
        let one = scalar(Some(0.0));
        let out = haversine_km_operands(1, &[one.clone(), one.clone(), one.clone(), one]).unwrap();
        assert_eq!(out, Float64Array::from(vec![0.0]));
    }

    #[test]
    fn operands_of_other_types_or_lengths_are_invalid_arguments() {
        let ints = Operand::Column(Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef);
        let ok = || column(vec![Some(1.0), Some(2.0)]);
        let e = haversine_km_operands(2, &[ok(), ints, ok(), ok()]).unwrap_err();
        assert_eq!(e.code(), "22U20");
        assert!(
            e.to_string()
                .contains("argument 2 is Int64, expected DOUBLE"),
            "{e}"
        );
        let e = haversine_km_operands(3, &[ok(), ok(), ok(), ok()]).unwrap_err();
        assert!(e.to_string().contains("argument 1 has 2 values"), "{e}");
    }
}
