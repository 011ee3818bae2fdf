// European option prices by the Black-Scholes formula, one thread per row: the same expressions,
// in the same order and with the same edge cases, as kernels::options::black_scholes_value on
// the CPU (compiled with --fmad=false). See that module for the semantics:
// - no price (NULL) for a non-finite argument, spot <= 0, strike <= 0, years < 0, volatility < 0;
// - the discounted intrinsic value when volatility * sqrt(years) is 0;
// - N(x) = 0.5 * erfc(-x / sqrt(2));
// - a price below 0 is clamped to 0; a price that is not finite is NULL.
//
// Each argument is a double pointer and a flag: a scalar (`*_scalar` != 0) is read at index 0.
// put: 0 call, 1 put. out[r] is the price (0 when NULL); bit r of `valid` (zeroed by the host) is
// set when the row has a price. NULL input rows are masked by the host.

__device__ __forceinline__ int is_finite(double x)
{
    // Exponent bits all ones: infinity or NaN.
    return (__double_as_longlong(x) & 0x7ff0000000000000LL) != 0x7ff0000000000000LL;
}

__device__ __forceinline__ double normal_cdf(double x)
{
    return 0.5 * erfc(-x * 0.70710678118654752440);
}

extern "C" __global__ void black_scholes(
    const double* spot, int spot_scalar, const double* strike, int strike_scalar,
    const double* years, int years_scalar, const double* rate, int rate_scalar,
    const double* volatility, int volatility_scalar,
    long long rows, int put, double* out, unsigned int* valid)
{
    const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) {
        return;
    }
    const double s = spot[spot_scalar ? 0 : row];
    const double k = strike[strike_scalar ? 0 : row];
    const double t = years[years_scalar ? 0 : row];
    const double r = rate[rate_scalar ? 0 : row];
    const double v = volatility[volatility_scalar ? 0 : row];
    double price = 0.0;
    int ok = 0;
    const int finite = is_finite(s) && is_finite(k) && is_finite(t) && is_finite(r) && is_finite(v);
    if (finite && s > 0.0 && k > 0.0 && t >= 0.0 && v >= 0.0) {
        const double discounted_strike = k * exp(-r * t);
        const double vol_sqrt_t = v * sqrt(t);
        if (vol_sqrt_t == 0.0) {
            price = put ? discounted_strike - s : s - discounted_strike;
        } else {
            const double d1 = (log(s / k) + (r + 0.5 * v * v) * t) / vol_sqrt_t;
            const double d2 = d1 - vol_sqrt_t;
            price = put ? discounted_strike * normal_cdf(-d2) - s * normal_cdf(-d1)
                        : s * normal_cdf(d1) - discounted_strike * normal_cdf(d2);
        }
        ok = is_finite(price);
        price = ok ? fmax(price, 0.0) : 0.0;
    }
    out[row] = price;
    if (ok) {
        atomicOr(&valid[row >> 5], 1u << (row & 31));
    }
}
