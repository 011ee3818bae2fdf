// Similarity of two vector operands, row by row: cosine_similarity, dot_product, l2_distance.
//
// One warp per row; each lane sums a strided share of the elements in double precision (float
// elements are widened first), then the warp adds the lanes' sums. Row r of an operand is
//   elements off[r] .. off[r+1]      when `off` is not null (lists of varying lengths), else
//   elements r*dim .. (r+1)*dim      (fixed-size lists, uniform lists, scalars);
// a scalar operand (`is_scalar` != 0) uses row 0 for every row. The host has checked that the
// two vectors of every row that is not NULL have the same length, and it masks the rows that are
// NULL in the input; those rows are computed anyway (over min of the lengths, so never out of
// bounds) and their values ignored.
//
// op: 0 cosine (NULL when a norm is 0), 1 dot, 2 l2. out[r] is the value; bit r of `valid`
// (zeroed by the host) is set unless the kernel makes the row NULL.

template <typename A, typename B>
__device__ void similarity(
    const A* a, const long long* a_off, long long a_dim, int a_scalar,
    const B* b, const long long* b_off, long long b_dim, int b_scalar,
    long long rows, int op, double* out, unsigned int* valid)
{
    const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    // Every lane of a warp has the same row, so a warp leaves (or stays) as a whole and the
    // shuffles below always see all 32 lanes.
    if (row >= rows) {
        return;
    }
    const long long ra = a_scalar ? 0 : row;
    const long long rb = b_scalar ? 0 : row;
    long long a0, an, b0, bn;
    if (a_off) {
        a0 = a_off[ra];
        an = a_off[ra + 1] - a0;
    } else {
        a0 = ra * a_dim;
        an = a_dim;
    }
    if (b_off) {
        b0 = b_off[rb];
        bn = b_off[rb + 1] - b0;
    } else {
        b0 = rb * b_dim;
        bn = b_dim;
    }
    const long long n = an < bn ? an : bn;

    double sum = 0.0, na = 0.0, nb = 0.0;
    for (long long i = lane; i < n; i += 32) {
        const double x = (double)a[a0 + i];
        const double y = (double)b[b0 + i];
        if (op == 2) {
            const double d = x - y;
            sum += d * d;
        } else {
            sum += x * y;
            na += x * x;
            nb += y * y;
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        sum += __shfl_down_sync(0xffffffffu, sum, offset);
        na += __shfl_down_sync(0xffffffffu, na, offset);
        nb += __shfl_down_sync(0xffffffffu, nb, offset);
    }
    if (lane == 0) {
        double value;
        int ok = 1;
        if (op == 0) {
            ok = na != 0.0 && nb != 0.0;
            value = ok ? sum / (sqrt(na) * sqrt(nb)) : 0.0;
        } else if (op == 1) {
            value = sum;
        } else {
            value = sqrt(sum);
        }
        out[row] = value;
        if (ok) {
            atomicOr(&valid[row >> 5], 1u << (row & 31));
        }
    }
}

#define SIMILARITY(NAME, A, B)                                                                 \
    extern "C" __global__ void NAME(                                                           \
        const A* a, const long long* a_off, long long a_dim, int a_scalar,                     \
        const B* b, const long long* b_off, long long b_dim, int b_scalar,                     \
        long long rows, int op, double* out, unsigned int* valid)                              \
    {                                                                                          \
        similarity<A, B>(a, a_off, a_dim, a_scalar, b, b_off, b_dim, b_scalar, rows, op, out,  \
                         valid);                                                               \
    }

SIMILARITY(vector_similarity_f32_f32, float, float)
SIMILARITY(vector_similarity_f32_f64, float, double)
SIMILARITY(vector_similarity_f64_f32, double, float)
SIMILARITY(vector_similarity_f64_f64, double, double)
