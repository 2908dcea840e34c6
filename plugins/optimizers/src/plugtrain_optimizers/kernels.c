/* One-pass float32 updates of the plugtrain optimizers on the CPU.
 *
 * Each elementwise function updates elements [0, n) of its arrays in one loop, reading every
 * input and writing every output once; Lamb and Adafactor take two and three passes. Each
 * exported function is a torch operator (plugtrain_optimizers/_native.py: a pointer a tensor,
 * written unless const), whose caller checks the arrays are float32, contiguous and distinct.
 *
 * Each line mirrors one in-place operation of the Python path, rounding as torch's CPU kernels
 * do: `add(x, y, alpha)`, `lerp` and `addcmul(x, a, b, value)` (as `fma(value * a, b, x)`) are
 * fused multiply-adds there; `addcdiv(x, a, b, value)` is `x + value * a / b`, unfused. The
 * library is compiled with -ffp-contract=off, so that only the explicit fmaf calls fuse, and
 * -fno-math-errno, so that sqrtf is the correctly rounded SIMD square root (errno unset).
 *
 * Adafactor's row sums are written with vector types (sums in the order torch's float32
 * reductions use); every other loop is left to the compiler's vectorizer, and a loop marked
 * "vectorized" is one it must vectorize (the tests read its report).
 */
#include <math.h>
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#else
#define omp_get_thread_num() 0
#define omp_get_num_threads() 1
#endif

#define RESTRICT __restrict__
#define INLINE static inline __attribute__((always_inline))

/* Elementwise loops are split between `threads` threads of torch's OpenMP runtime (built
 * without OpenMP, a loop runs on one thread).
 *
 * Every loop body is free of branches, so that the compiler makes SIMD code of it for AVX2 as
 * for AVX-512 without a flag that changes a result: a choice is a select between values both
 * computed unconditionally, comparisons included (the compiler may still make two loops of one
 * for a choice fixed for the whole loop, each without it). Under the default -ftrapping-math the
 * compiler may not evaluate an operation the C code evaluates on one branch only, so a
 * conditional operation leaves a branch in the loop and the loop scalar where the target has
 * no masked SIMD operations (AVX2). A loop marked "vectorized" is checked to be by the tests,
 * from the compiler's vectorizer report. */
#define PARALLEL_FOR _Pragma("omp parallel for num_threads(threads) if (threads > 1) schedule(static)")

/* torch.lerp(start, end, weight): weight * (end - start) fused onto start below 0.5, and
 * (weight - 1) * (end - start) onto end from 0.5 on. */
INLINE float lerp(float start, float end, float weight) {
    const int low = weight < 0.5f;
    const float above = weight - 1.0f;
    return fmaf(low ? weight : above, end - start, low ? start : end);
}

INLINE float sign(float x) {
    return (float)((x > 0.0f) - (x < 0.0f));
}

/* torch.clamp: NaN stays NaN. */
INLINE float clamp(float x, float low, float high) {
    x = x < low ? low : x;
    return x > high ? high : x;
}

/* torch.maximum: NaN if either is NaN (b's when only b is: a > b is then false). */
INLINE float maximum(float a, float b) {
    const float larger = a > b ? a : b;
    return a != a ? a : larger;
}

/* The gradient a step uses: -g under maximize (flip = -1), plus weight_decay * p where
 * `decayed` (weight_decay != 0, fixed for the loop). */
INLINE float effective(float g, float p, float flip, float weight_decay, int decayed) {
    const float flipped = g * flip;
    const float with_decay = fmaf(weight_decay, p, flipped);
    return decayed ? with_decay : flipped;
}

/* Lion: p *= decay; p -= lr sign(lerp(m, g, 1 - beta1)); m = lerp(m, g, 1 - beta2). */
void plugtrain_lion_step(int64_t n, int64_t threads, float *RESTRICT p, const float *RESTRICT g,
                         float *RESTRICT m, float lr, float decay, float w1, float w2) {
    const float neg_lr = -lr;
    PARALLEL_FOR
    for (int64_t i = 0; i < n; i++) { /* vectorized */
        const float mi = m[i], gi = g[i];
        const float direction = sign(lerp(mi, gi, w1));
        p[i] = fmaf(neg_lr, direction, p[i] * decay);
        m[i] = lerp(mi, gi, w2);
    }
}

/* Adadelta: s = rho s + (1 - rho) g^2; d = sqrt((a + eps) / (s + eps)) g;
 * a = rho a + (1 - rho) d^2; p -= lr d. */
void plugtrain_adadelta_step(int64_t n, int64_t threads, float *RESTRICT p,
                             const float *RESTRICT g, float *RESTRICT square_avg,
                             float *RESTRICT acc_delta, float lr, float rho, float keep,
                             float eps, float weight_decay, float flip) {
    const float neg_lr = -lr;
    const int decayed = weight_decay != 0.0f;
    PARALLEL_FOR
    for (int64_t i = 0; i < n; i++) { /* vectorized */
        const float pi = p[i];
        const float gi = effective(g[i], pi, flip, weight_decay, decayed);
        const float s = fmaf(keep * gi, gi, square_avg[i] * rho);
        const float delta = sqrtf((acc_delta[i] + eps) / (s + eps)) * gi;
        square_avg[i] = s;
        acc_delta[i] = fmaf(keep * delta, delta, acc_delta[i] * rho);
        p[i] = fmaf(neg_lr, delta, pi);
    }
}

/* ASGD: p *= 1 - lambd eta; p -= eta g; ax = lerp(ax, p, mu) (a copy while mu = 1: a loop that
 * does not read ax). */
void plugtrain_asgd_step(int64_t n, int64_t threads, float *RESTRICT p, const float *RESTRICT g,
                         float *RESTRICT ax, float eta, float decay, float mu, float weight_decay,
                         float flip) {
    const float neg_eta = -eta;
    const int decayed = weight_decay != 0.0f;
    if (mu == 1.0f) {
        PARALLEL_FOR
        for (int64_t i = 0; i < n; i++) { /* vectorized */
            const float pi = p[i];
            const float gi = effective(g[i], pi, flip, weight_decay, decayed);
            const float next = fmaf(neg_eta, gi, pi * decay);
            p[i] = next;
            ax[i] = next;
        }
        return;
    }
    PARALLEL_FOR
    for (int64_t i = 0; i < n; i++) { /* vectorized */
        const float pi = p[i];
        const float gi = effective(g[i], pi, flip, weight_decay, decayed);
        const float next = fmaf(neg_eta, gi, pi * decay);
        p[i] = next;
        ax[i] = lerp(ax[i], next, mu);
    }
}

/* Adamax: m = lerp(m, g, 1 - beta1); u = max(beta2 u, |g| + eps); p += size m / u
 * (size = -lr / (1 - beta1^t)). */
void plugtrain_adamax_step(int64_t n, int64_t threads, float *RESTRICT p, const float *RESTRICT g,
                           float *RESTRICT m, float *RESTRICT u, float size, float w1, float beta2,
                           float eps, float weight_decay, float flip) {
    const int decayed = weight_decay != 0.0f;
    PARALLEL_FOR
    for (int64_t i = 0; i < n; i++) { /* vectorized */
        const float pi = p[i];
        const float gi = effective(g[i], pi, flip, weight_decay, decayed);
        const float mi = lerp(m[i], gi, w1);
        const float ui = maximum(u[i] * beta2, fabsf(gi) + eps);
        m[i] = mi;
        u[i] = ui;
        p[i] = pi + (size * mi) / ui;
    }
}

/* NAdam (cstorch's): g += wd p (L2); m = lerp(m, g, 1 - beta1); v = beta2 v + (1 - beta2) g^2;
 * d = sqrt(v) + c eps; p += k_g g / d; p += k_m m / d (the coefficients folding in the bias
 * corrections and the momentum schedule). */
void plugtrain_nadam_step(int64_t n, int64_t threads, float *RESTRICT p, const float *RESTRICT g,
                          float *RESTRICT m, float *RESTRICT v, float w1, float beta2, float keep,
                          float c_eps, float grad_coef, float momentum_coef, float weight_decay) {
    const int decayed = weight_decay != 0.0f;
    PARALLEL_FOR
    for (int64_t i = 0; i < n; i++) { /* vectorized */
        const float pi = p[i];
        const float gi = effective(g[i], pi, 1.0f, weight_decay, decayed);
        const float mi = lerp(m[i], gi, w1);
        const float vi = fmaf(keep * gi, gi, v[i] * beta2);
        const float denom = sqrtf(vi) + c_eps;
        const float stepped = pi + (grad_coef * gi) / denom;
        m[i] = mi;
        v[i] = vi;
        p[i] = stepped + (momentum_coef * mi) / denom;
    }
}

/* Rprop: s = sign(g prev); step_size = clamp(step_size * (etaplus | etaminus | 1), low, high);
 * prev = g * (s < 0 ? 0 : 1); p -= sign(prev) step_size. The 0/1 factor is converted from the
 * comparison, not selected: the compiler would move a product with a selected constant into
 * the branches. */
void plugtrain_rprop_step(int64_t n, int64_t threads, float *RESTRICT p, const float *RESTRICT g,
                          float *RESTRICT prev, float *RESTRICT step_size, float etaminus,
                          float etaplus, float low, float high) {
    PARALLEL_FOR
    for (int64_t i = 0; i < n; i++) { /* vectorized */
        const float gi = g[i], product = gi * prev[i];
        const int grew = product > 0.0f, flipped = product < 0.0f;
        const float shrink = flipped ? etaminus : 1.0f;
        const float size = clamp(step_size[i] * (grew ? etaplus : shrink), low, high);
        const float kept = gi * (float)(1 - flipped);
        step_size[i] = size;
        prev[i] = kept;
        p[i] = fmaf(-1.0f * sign(kept), size, p[i]);
    }
}

/* Schedule-Free AdamW without weight decay: v = beta2 v + (1 - beta2) g^2;
 * u = g / (sqrt(v) + eps root); y = lerp(y, z, ckp1) + y_rate root u; z -= lr root u. */
void plugtrain_adamw_schedule_free_step(int64_t n, int64_t threads, float *RESTRICT y,
                                        const float *RESTRICT g, float *RESTRICT z,
                                        float *RESTRICT v, float beta2, float keep,
                                        float eps_root, float ckp1, float y_scale, float z_scale) {
    PARALLEL_FOR
    for (int64_t i = 0; i < n; i++) { /* vectorized */
        const float gi = g[i], zi = z[i];
        const float vi = fmaf(keep * gi, gi, v[i] * beta2);
        const float denom = sqrtf(vi) + eps_root;
        v[i] = vi;
        y[i] = lerp(y[i], zi, ckp1) + (y_scale * gi) / denom;
        z[i] = zi + (z_scale * gi) / denom;
    }
}

/* Schedule-Free AdamW with weight decay: d = decay y + root g / (sqrt(v) + eps root);
 * y = lerp(y, z, ckp1) + y_rate d; z -= lr d. */
void plugtrain_adamw_schedule_free_decay_step(int64_t n, int64_t threads, float *RESTRICT y,
                                              const float *RESTRICT g, float *RESTRICT z,
                                              float *RESTRICT v, float beta2, float keep,
                                              float eps_root, float ckp1, float root,
                                              float decay, float y_rate, float lr) {
    const float neg_lr = -lr;
    PARALLEL_FOR
    for (int64_t i = 0; i < n; i++) { /* vectorized */
        const float gi = g[i], zi = z[i], yi = y[i];
        const float vi = fmaf(keep * gi, gi, v[i] * beta2);
        const float denom = sqrtf(vi) + eps_root;
        const float normalized = yi * decay + (root * gi) / denom;
        v[i] = vi;
        y[i] = fmaf(y_rate, normalized, lerp(yi, zi, ckp1));
        z[i] = fmaf(neg_lr, normalized, zi);
    }
}

/* Schedule-Free SGD: d = g + decay y; y = lerp(y, z, ckp1) + y_rate d; z -= lr d. */
void plugtrain_sgd_schedule_free_step(int64_t n, int64_t threads, float *RESTRICT y,
                                      const float *RESTRICT g, float *RESTRICT z, float ckp1,
                                      float decay, float y_rate, float lr) {
    const float neg_lr = -lr;
    const int decayed = decay != 0.0f;
    PARALLEL_FOR
    for (int64_t i = 0; i < n; i++) { /* vectorized */
        const float yi = y[i], zi = z[i];
        const float step = effective(g[i], yi, 1.0f, decay, decayed);
        y[i] = fmaf(y_rate, step, lerp(yi, zi, ckp1));
        z[i] = fmaf(neg_lr, step, zi);
    }
}

/* Lamb's ratio r = m / (sqrt(v) + eps), plus wd p where `decayed`. */
INLINE float lamb_ratio(float p, float m, float v, float eps, float weight_decay, int decayed) {
    const float quotient = m / (sqrtf(v) + eps);
    const float with_decay = fmaf(weight_decay, p, quotient);
    return decayed ? with_decay : quotient;
}

/* Lamb's moments of one element: m = lerp(m, g, 1 - beta1); v = beta2 v + (1 - beta2) g^2;
 * returns the ratio r. */
INLINE float lamb_moment(float p, float g, float *RESTRICT m, float *RESTRICT v, float w1,
                         float beta2, float keep, float eps, float weight_decay, int decayed) {
    const float mi = lerp(*m, g, w1);
    const float vi = fmaf(keep * g, g, *v * beta2);
    *m = mi;
    *v = vi;
    return lamb_ratio(p, mi, vi, eps, weight_decay, decayed);
}

#define LAMB_SUMS                                                                            \
    _Pragma("omp parallel for simd num_threads(threads) if (threads > 1) schedule(static) reduction(+ : weights, ratios)")

/* Lamb's first pass: the moments and sums = (|p|^2, |r|^2), accumulated in double. r is not
 * stored: the second pass (plugtrain_lamb_apply) computes it again from p, m and v, which it
 * reads anyway. A loop for each weight decay choice: the compiler does not split an OpenMP SIMD
 * loop by an invariant condition itself. */
void plugtrain_lamb_moments(int64_t n, int64_t threads, const float *RESTRICT p,
                            const float *RESTRICT g, float *RESTRICT m, float *RESTRICT v,
                            double *RESTRICT sums, float w1, float beta2, float keep, float eps,
                            float weight_decay) {
    double weights = 0.0, ratios = 0.0;
    if (weight_decay != 0.0f) {
        LAMB_SUMS
        for (int64_t i = 0; i < n; i++) { /* vectorized */
            const float pi = p[i];
            const float ri = lamb_moment(pi, g[i], m + i, v + i, w1, beta2, keep, eps,
                                         weight_decay, 1);
            weights += (double)pi * (double)pi;
            ratios += (double)ri * (double)ri;
        }
    } else {
        LAMB_SUMS
        for (int64_t i = 0; i < n; i++) { /* vectorized */
            const float pi = p[i];
            const float ri = lamb_moment(pi, g[i], m + i, v + i, w1, beta2, keep, eps,
                                         weight_decay, 0);
            weights += (double)pi * (double)pi;
            ratios += (double)ri * (double)ri;
        }
    }
    sums[0] = weights;
    sums[1] = ratios;
}

/* Lamb's second pass: p += scale r (scale = -lr trust). */
void plugtrain_lamb_apply(int64_t n, int64_t threads, float *RESTRICT p, const float *RESTRICT m,
                          const float *RESTRICT v, float scale, float eps, float weight_decay) {
    const int decayed = weight_decay != 0.0f;
    PARALLEL_FOR
    for (int64_t i = 0; i < n; i++) { /* vectorized */
        const float pi = p[i];
        p[i] = fmaf(scale, lamb_ratio(pi, m[i], v[i], eps, weight_decay, decayed), pi);
    }
}

/* Eight floats. A row's sums use four of them (32 columns a step), so that the additions into
 * one accumulator do not wait on each other. */
typedef float floats8 __attribute__((vector_size(32)));

static inline floats8 load8(const float *x) {
    floats8 v;
    __builtin_memcpy(&v, x, sizeof v);
    return v;
}

static inline void store8(float *x, floats8 v) {
    __builtin_memcpy(x, &v, sizeof v);
}

static inline float total8(floats8 a, floats8 b, floats8 c, floats8 d) {
    const floats8 v = (a + b) + (c + d);
    float total = 0.0f;
    for (int j = 0; j < 8; j++) {
        total += v[j];
    }
    return total;
}

/* Adafactor, factored second moment, on a row range of one (rows x cols) matrix.
 *
 * Pass 1, stats_range: row_sums[r] = sum_c g^2, col_sums[c] += sum_r g^2 and
 * sums[0] += |p|^2 over the range. Then the caller updates the statistics and makes the
 * factors rf (rows) and cf (cols). Pass 2, rms_range: sums[0] += sum over the range of
 * rf_r^2 cf_c^2 g_rc^2 (the update's squared norm). Pass 3, apply_range:
 * p = p * decay + (g * rf_r scale) * cf_c.
 *
 * Within a row, sums run in float32 over 32 interleaved partial sums (as torch's float32
 * reductions do); a row's total joins the matrix's total in double. */
static void stats_range(int64_t rows, int64_t cols, const float *RESTRICT p,
                        const float *RESTRICT g, double *RESTRICT row_sums,
                        float *RESTRICT col_sums, double *RESTRICT sums) {
    const int64_t whole = cols - cols % 32;
    double weights = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        const float *RESTRICT pr = p + r * cols, *RESTRICT gr = g + r * cols;
        floats8 along[4] = {{0}}, squares[4] = {{0}};
        for (int64_t c = 0; c < whole; c += 32) {
            for (int q = 0; q < 4; q++) {
                const floats8 gv = load8(gr + c + 8 * q), pv = load8(pr + c + 8 * q);
                const floats8 u = gv * gv;
                along[q] += u;
                store8(col_sums + c + 8 * q, load8(col_sums + c + 8 * q) + u);
                squares[q] += pv * pv;
            }
        }
        float along_tail = 0.0f, squares_tail = 0.0f;
        for (int64_t c = whole; c < cols; c++) {
            const float u = gr[c] * gr[c];
            along_tail += u;
            col_sums[c] += u;
            squares_tail += pr[c] * pr[c];
        }
        row_sums[r] = (double)(total8(along[0], along[1], along[2], along[3]) + along_tail);
        weights += (double)(total8(squares[0], squares[1], squares[2], squares[3]) + squares_tail);
    }
    sums[0] += weights;
}

static void rms_range(int64_t rows, int64_t cols, const float *RESTRICT g,
                      const float *RESTRICT rf, const float *RESTRICT cf, double *RESTRICT sums) {
    const int64_t whole = cols - cols % 32;
    double total = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        const float *RESTRICT gr = g + r * cols;
        floats8 along[4] = {{0}};
        for (int64_t c = 0; c < whole; c += 32) {
            for (int q = 0; q < 4; q++) {
                const floats8 u = load8(gr + c + 8 * q) * load8(cf + c + 8 * q);
                along[q] += u * u;
            }
        }
        float tail = 0.0f;
        for (int64_t c = whole; c < cols; c++) {
            const float u = gr[c] * cf[c];
            tail += u * u;
        }
        const float row_total = total8(along[0], along[1], along[2], along[3]) + tail;
        total += (double)row_total * (double)rf[r] * (double)rf[r];
    }
    sums[0] += total;
}

static void apply_range(int64_t rows, int64_t cols, float *RESTRICT p, const float *RESTRICT g,
                        const float *RESTRICT rf, const float *RESTRICT cf, float scale,
                        float decay) {
    for (int64_t r = 0; r < rows; r++) {
        float *RESTRICT pr = p + r * cols;
        const float *RESTRICT gr = g + r * cols;
        const float row_scale = rf[r] * scale;
        if (decay != 1.0f) {
            for (int64_t c = 0; c < cols; c++) { /* vectorized */
                pr[c] = fmaf(gr[c] * row_scale, cf[c], pr[c] * decay);
            }
        } else {
            for (int64_t c = 0; c < cols; c++) { /* vectorized */
                pr[c] = fmaf(gr[c] * row_scale, cf[c], pr[c]);
            }
        }
    }
}

/* The rows [first, last) of thread `index` of `count`. */
static inline void row_share(int64_t rows, int index, int count, int64_t *first, int64_t *last) {
    const int64_t share = (rows + count - 1) / count;
    *first = index * share < rows ? index * share : rows;
    *last = *first + share < rows ? *first + share : rows;
}

/* The three passes over a large matrix, each split by rows between `threads` threads: thread t
 * adds its column sums into col_sums[t * cols ...] and its sums into sums[t] (the caller zeroes
 * `threads` of each and adds them up). */
void plugtrain_adafactor_stats(int64_t rows, int64_t cols, int64_t threads,
                               const float *RESTRICT p, const float *RESTRICT g,
                               double *RESTRICT row_sums, float *RESTRICT col_sums,
                               double *RESTRICT sums) {
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        int64_t first, last;
        const int t = omp_get_thread_num();
        row_share(rows, t, omp_get_num_threads(), &first, &last);
        stats_range(last - first, cols, p + first * cols, g + first * cols, row_sums + first,
                    col_sums + t * cols, sums + t);
    }
}

void plugtrain_adafactor_rms(int64_t rows, int64_t cols, int64_t threads,
                             const float *RESTRICT g, const float *RESTRICT rf,
                             const float *RESTRICT cf, double *RESTRICT sums) {
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        int64_t first, last;
        const int t = omp_get_thread_num();
        row_share(rows, t, omp_get_num_threads(), &first, &last);
        rms_range(last - first, cols, g + first * cols, rf + first, cf, sums + t);
    }
}

void plugtrain_adafactor_apply(int64_t rows, int64_t cols, int64_t threads, float *RESTRICT p,
                               const float *RESTRICT g, const float *RESTRICT rf,
                               const float *RESTRICT cf, float scale, float decay) {
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        int64_t first, last;
        row_share(rows, omp_get_thread_num(), omp_get_num_threads(), &first, &last);
        apply_range(last - first, cols, p + first * cols, g + first * cols, rf + first, cf,
                    scale, decay);
    }
}

/* The factors from updated statistics: rf_r = rsqrt(row_r / mean(row)), cf_c = rsqrt(col_c). */
static void adafactor_factors(int64_t rows, int64_t cols, const float *RESTRICT row,
                              const float *RESTRICT col, float *RESTRICT rf, float *RESTRICT cf) {
    double total = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        total += row[r];
    }
    const float mean = (float)(total / (double)rows);
    for (int64_t r = 0; r < rows; r++) { /* vectorized */
        rf[r] = 1.0f / sqrtf(row[r] / mean);
    }
    for (int64_t c = 0; c < cols; c++) { /* vectorized */
        cf[c] = 1.0f / sqrtf(col[c]);
    }
}

/* The whole factored step of `count` (rows x cols) matrices, split between `threads` threads
 * (each takes whole matrices). p, g, row_state and col_state are arrays of `count` pointers (to
 * rows x cols, rows, cols floats); work holds `threads` blocks of 2 (rows + cols) doubles.
 * scale_parameter: rho is lr max(RMS(p), eps2), else lr. */
void plugtrain_adafactor_matrices(int64_t count, int64_t rows, int64_t cols, int64_t threads,
                                  float *const *RESTRICT p, const float *const *RESTRICT g,
                                  float *const *RESTRICT row_state,
                                  float *const *RESTRICT col_state, double *RESTRICT work,
                                  float beta, float keep, float eps1, float eps2, float lr,
                                  float weight_decay, float clip, float scale_parameter) {
    const double root = sqrt((double)(rows * cols));
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        double *row_sums = work + omp_get_thread_num() * 2 * (rows + cols);
        float *col_sums = (float *)(row_sums + rows), *rf = col_sums + cols, *cf = rf + rows;
#pragma omp for schedule(static)
        for (int64_t k = 0; k < count; k++) {
            float *RESTRICT pk = p[k], *RESTRICT row = row_state[k], *RESTRICT col = col_state[k];
            const float *RESTRICT gk = g[k];
            double sums[1] = {0.0};
            for (int64_t c = 0; c < cols; c++) {
                col_sums[c] = 0.0f;
            }
            stats_range(rows, cols, pk, gk, row_sums, col_sums, sums);
            double rho = lr;
            if (scale_parameter != 0.0f) {
                const double rms = sqrt(sums[0]) / root;
                rho = (double)lr * (rms > eps2 ? rms : (double)eps2);
            }
            for (int64_t r = 0; r < rows; r++) { /* vectorized */
                row[r] = fmaf(keep, (float)(row_sums[r] / (double)cols) + eps1, row[r] * beta);
            }
            for (int64_t c = 0; c < cols; c++) { /* vectorized */
                col[c] = fmaf(keep, col_sums[c] / (float)rows + eps1, col[c] * beta);
            }
            adafactor_factors(rows, cols, row, col, rf, cf);
            sums[0] = 0.0;
            rms_range(rows, cols, gk, rf, cf, sums);
            const double update_rms = sqrt(sums[0]) / root / (double)clip;
            const double scale = -rho / (update_rms > 1.0 ? update_rms : 1.0);
            const double decayed = 1.0 - (double)weight_decay * rho;
            const float decay = weight_decay != 0.0f ? (float)decayed : 1.0f;
            apply_range(rows, cols, pk, gk, rf, cf, (float)scale, decay);
        }
    }
}
