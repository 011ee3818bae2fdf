//! Great-circle distance on the WGS-84 mean Earth radius (haversine formula).

use arrow::array::{Array, Float64Array};

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

#[cfg(test)]
mod tests {
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
}
