/*
 * bench/serve_schedule.c - when each request of `bench serve` arrives (see serve.h).
 *
 * vLLM's get_request: gaps from a gamma distribution of shape b (the burstiness) and scale
 * 1 / (rate * b), so the mean gap is 1 / rate whatever b; their running sum scaled so the last
 * arrival lands at n / rate exactly (the sum of random gaps strays a few percent from it,
 * which would move the offered load from seed to seed).
 *
 * The random numbers are splitmix64 from the seed, uniforms in (0, 1) from its top 53 bits.
 * For b = 1 a gap is -ln(u) / rate, simple enough for a test to recompute the schedule.
 * Other shapes use Marsaglia and Tsang's method (shape < 1 through shape + 1 and u^(1/b)).
 */
#include <math.h>
#include <stddef.h>

#include "bench/serve.h"

static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform(uint64_t *s) { /* in (0, 1): never 0, so log() stays finite */
    return ((double)(next_u64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static double normal(uint64_t *s) { /* Box-Muller */
    double u1 = uniform(s), u2 = uniform(s);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* A gamma variate of shape k > 0 and scale 1. */
static double gamma1(uint64_t *s, double k) {
    if (k < 1.0) return gamma1(s, k + 1.0) * pow(uniform(s), 1.0 / k);
    double d = k - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = normal(s), v = 1.0 + c * x;
        if (v <= 0) continue;
        v = v * v * v;
        if (log(uniform(s)) < 0.5 * x * x + d - d * v + d * log(v)) return d * v;
    }
}

void pl_bench_arrivals(size_t n, double rate, double burstiness, uint64_t seed, double *out) {
    if (n == 0) return;
    if (!(rate > 0) || isinf(rate)) {
        for (size_t i = 0; i < n; i++) out[i] = 0.0;
        return;
    }
    uint64_t st = seed * 0x2545F4914F6CDD1Dull + 13;
    double t = 0.0, theta = 1.0 / (rate * burstiness);
    for (size_t i = 0; i < n; i++) {
        double gap;
        if (isinf(burstiness))
            gap = 1.0 / rate;
        else if (burstiness == 1.0)
            gap = -log(uniform(&st)) * theta;
        else
            gap = gamma1(&st, burstiness) * theta;
        t += gap;
        out[i] = t;
    }
    double scale = ((double)n / rate) / out[n - 1];
    for (size_t i = 0; i < n; i++) out[i] *= scale;
}
