// Great-circle distance by the haversine formula, one thread per row: the same expressions, in
// the same order, as kernels::geo::haversine_km_value on the CPU (compiled with --fmad=false, so
// no product is fused into an addition the CPU does not fuse).
//
// Each argument is a double pointer and a flag: a scalar (`*_scalar` != 0) is read at index 0
// for every row. NULL rows are masked by the host; the kernel computes every row.

extern "C" __global__ void haversine_km(
    const double* lat1, int lat1_scalar, const double* lon1, int lon1_scalar,
    const double* lat2, int lat2_scalar, const double* lon2, int lon2_scalar,
    long long rows, double radius, double* out)
{
    const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) {
        return;
    }
    // Rust's f64::to_radians multiplies by PI / 180 (rounded once, as here).
    const double to_radians = 3.141592653589793 / 180.0;
    const double p1 = lat1[lat1_scalar ? 0 : row] * to_radians;
    const double p2 = lat2[lat2_scalar ? 0 : row] * to_radians;
    const double dp = p2 - p1;
    const double dl = (lon2[lon2_scalar ? 0 : row] - lon1[lon1_scalar ? 0 : row]) * to_radians;
    const double s = sin(dp / 2.0);
    const double t = sin(dl / 2.0);
    const double a = s * s + cos(p1) * cos(p2) * (t * t);
    out[row] = 2.0 * radius * asin(fmin(sqrt(a), 1.0));
}
