/*
 * kernels/cpu/qgemm_amx.c - the int8 GEMM's AMX micro-kernel: tiles of 32 activation rows x
 * 32 panel columns.
 *
 * Per block of kb k: A tiles (16 rows x kb bytes of the activations, two of them) and B tiles
 * (kb/4 rows x 64 bytes: 4 k of 16 columns, the panel as stored) feed four tdpbssd (signed x
 * signed: the panel is signed, no offset) into four 16 x 16 int32 C tiles, which are stored
 * and scaled into f32 rows in qgemm.h's order, so the result is the other kernels' bit for
 * bit. The scaling is per block because the activations' scales are per 32: it costs more
 * than the tile products themselves (per block, 64 row vectors of convert, multiply and
 * multiply-add), which bounds this kernel well below the tiles' peak. So the blocks go in
 * groups of PL_QG_AMX_G, each row's accumulator held in a register through a group, and the
 * kernel walks every 32-row tile of the call itself, scaling one group while the next one's
 * products are made (bench_kernels, 512 rows, one thread: Q4_0 325-360 GOPS per block and
 * tile, 400-455 so).
 *
 * Linux hands out the tile data state only to a process that asked for it
 * (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); without that, or on a CPU without
 * AMX-INT8, pl_qg_amx_available says no and the ctx never picks this kernel. Each thread
 * loads its tile configuration before each panel (pl_qg_amx_config) and releases the tiles
 * when its task ends.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/qgemm.h"

#if defined(PL_CPU_X86) && defined(__linux__) && defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static bool g_amx;
static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;

static void amx_probe(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    bool tile = d & (1u << 24), int8 = d & (1u << 25);
    if (!tile || !int8) return;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return; /* the OS does not manage the tile state */
    g_amx = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

bool pl_qg_amx_available(void) {
    pthread_once(&g_amx_once, amx_probe);
    return g_amx;
}

typedef struct tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

/* Tiles 0-3: C (16 x 16 int32); 4, 5: A (16 rows x kb bytes); 6, 7: B (kb/4 rows x 64 bytes). */
PL_TARGET_AMX void pl_qg_amx_config(int kb) {
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 4; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    for (int t = 4; t < 6; t++) cfg.colsb[t] = (uint16_t)kb, cfg.rows[t] = 16;
    for (int t = 6; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = (uint8_t)(kb / 4);
    /* GCC 12 does not see ldtilecfg read its operand and drops the stores above */
    __asm__ volatile("" : : "m"(cfg) : "memory");
    _tile_loadconfig(&cfg);
}

PL_TARGET_AMX void pl_qg_amx_release(void) { _tile_release(); }

/* The tile products of block b of the 32 rows at x0 into C tiles stored at ci (4 x 256
 * int32: rows 0-15 by columns 0-15 and 16-31, then rows 16-31). */
PL_INLINE PL_TARGET_AMX void products(const pl_qg_panel *P, const int8_t *x0, size_t xq_stride,
                                      int b, int32_t *ci, const int kb, const bool two) {
    const size_t bstride = (size_t)P->nr * 4;
    const uint8_t *lev = P->lev + (size_t)b * (kb / 4) * bstride;
    _tile_zero(0);
    _tile_zero(1);
    _tile_loadd(4, x0 + (size_t)b * kb, xq_stride);
    _tile_loadd(6, lev, bstride);
    _tile_loadd(7, lev + 64, bstride);
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_stored(0, ci, 64);
    _tile_stored(1, ci + 256, 64);
    if (two) {
        _tile_zero(2);
        _tile_zero(3);
        _tile_loadd(5, x0 + 16 * xq_stride + (size_t)b * kb, xq_stride);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
        _tile_stored(2, ci + 512, 64);
        _tile_stored(3, ci + 768, 64);
    }
}

/* nb consecutive blocks from b0 of the rows m0 .. m0 + rows - 1 (one 32-row tile) over one
 * chunk: the first group of the chunk starts the f32 accumulators at 0, the last adds them
 * to (accumulate) or stores them as the output, the others keep them in facc (32 x 32). */
typedef struct amx_group {
    int m0, rows, b0, nb;
    bool first, last, accumulate;
} amx_group;

/* Group G's C tiles (block j's four at ci + 1024 j, as products stores them) scaled into the
 * accumulators of rows 16 i .. 16 i + 15 and columns 16 nh .. 16 nh + 15, each row's in a
 * register through the group, the blocks in order; nb is G->nb (a constant where it is
 * PL_QG_AMX_G). */
PL_INLINE PL_TARGET_AMX void scale_tile(const pl_qg_panel *P, const pl_qg_amx_rows *R,
                                        const amx_group *G, const int nb, const int32_t *ci,
                                        float *facc, float *out, size_t ldo, int i, int nh,
                                        const int kb, const bool has_mn) {
    const int n0 = 16 * nh, left = P->n_valid - n0;
    if (left <= 0) return; /* columns past the weight's rows: never stored */
    const __mmask16 keep = left >= 16 ? 0xffff : pl_avx512_mask(left);
    const size_t nd = (size_t)P->K / 32;
    __m512 sc[PL_QG_AMX_G], mn[PL_QG_AMX_G];
    for (int j = 0; j < nb; j++) {
        sc[j] = _mm512_loadu_ps(P->sc + (size_t)(G->b0 + j) * 32 + n0);
        mn[j] = has_mn ? _mm512_loadu_ps(P->mn + (size_t)(G->b0 + j) * 32 + n0)
                       : _mm512_setzero_ps();
    }
    const int rows = G->rows - 16 * i < 16 ? G->rows - 16 * i : 16;
    ci += 256 * (2 * i + nh);
    for (int r = 0; r < rows; r++) {
        const int lr = 16 * i + r, m = G->m0 + lr;
        const float *d = R->d + (size_t)m * nd, *ds = R->ds + (size_t)m * nd;
        float *f = facc + (size_t)lr * 32 + n0;
        __m512 a = G->first ? _mm512_setzero_ps() : _mm512_loadu_ps(f);
#pragma GCC unroll 4
        for (int j = 0; j < nb; j++) {
            const int b = G->b0 + j;
            __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(ci + 1024 * j + 16 * r)),
                                     sc[j]);
            a = _mm512_fmadd_ps(t, _mm512_set1_ps(d[b * kb / 32]), a);
            if (has_mn) a = _mm512_fnmadd_ps(mn[j], _mm512_set1_ps(ds[b]), a);
        }
        if (!G->last) {
            _mm512_storeu_ps(f, a);
            continue;
        }
        float *o = out + (size_t)m * ldo + n0;
        if (G->accumulate) a = _mm512_add_ps(_mm512_maskz_loadu_ps(keep, o), a);
        _mm512_mask_storeu_ps(o, keep, a);
    }
}

PL_INLINE PL_TARGET_AMX void scale_group(const pl_qg_panel *P, const pl_qg_amx_rows *R,
                                         const amx_group *G, const int32_t *ci, float *facc,
                                         float *out, size_t ldo, const int kb,
                                         const bool has_mn) {
    for (int i = 0; i < 2 && 16 * i < G->rows; i++)
        for (int nh = 0; nh < 2; nh++) {
            if (G->nb == PL_QG_AMX_G) /* a constant count: the block loop unrolled */
                scale_tile(P, R, G, PL_QG_AMX_G, ci, facc, out, ldo, i, nh, kb, has_mn);
            else
                scale_tile(P, R, G, G->nb, ci, facc, out, ldo, i, nh, kb, has_mn);
        }
}

/* Every group of every (chunk, tile) in one stream: a group's products go to one half of the
 * int32 buffer while the previous group's, stored the round before, are scaled from the
 * other, across the tiles too. A vector load right after the tile store that wrote its data
 * waits for that store to complete (measured: ~1000 TSC cycles a block unpipelined, 10x the
 * products' own time), so only the panel's very last group is scaled unpipelined. */
PL_INLINE PL_TARGET_AMX void panel(const pl_qg_panel *P, const pl_qg_amx_rows *R, float *out,
                                   size_t ldo, void *scratch, const int kb, const bool has_mn) {
    float *facc = scratch;                                      /* (32, 32) */
    int32_t *ci = (int32_t *)((unsigned char *)scratch + 4096); /* 2 x G x 4 x (16, 16) */
    const int half_elems = PL_QG_AMX_G * 1024;
    amx_group prev = {.nb = 0};
    int half = 0;
    for (int k0 = 0; k0 < P->K; k0 += PL_QG_KC) {
        const int b0 = k0 / kb, b1 = (P->K - k0 < PL_QG_KC ? P->K : k0 + PL_QG_KC) / kb;
        for (int m0 = 0; m0 < R->n_rows; m0 += 32) {
            const int rows = R->n_rows - m0 < 32 ? R->n_rows - m0 : 32;
            const int8_t *x0 = R->xq + (size_t)m0 * R->xq_stride;
            for (int g = b0; g < b1; g += PL_QG_AMX_G, half ^= 1) {
                amx_group cur = {.m0 = m0, .rows = rows, .b0 = g,
                                 .nb = b1 - g < PL_QG_AMX_G ? b1 - g : PL_QG_AMX_G,
                                 .first = g == b0, .last = g + PL_QG_AMX_G >= b1,
                                 .accumulate = k0 > 0};
                int32_t *buf = ci + half * half_elems;
                for (int j = 0; j < cur.nb; j++)
                    products(P, x0, R->xq_stride, g + j, buf + 1024 * j, kb, rows > 16);
                if (prev.nb)
                    scale_group(P, R, &prev, ci + (half ^ 1) * half_elems, facc, out, ldo, kb,
                                has_mn);
                prev = cur;
            }
        }
    }
    if (prev.nb) scale_group(P, R, &prev, ci + (half ^ 1) * half_elems, facc, out, ldo, kb, has_mn);
}

PL_TARGET_AMX void pl_qg_amx_panel(const pl_qg_panel *P, const pl_qg_amx_rows *R, float *out,
                                   size_t ldo, void *scratch) {
    if (P->kb == 16)
        panel(P, R, out, ldo, scratch, 16, false);
    else if (P->has_mn)
        panel(P, R, out, ldo, scratch, 32, true);
    else
        panel(P, R, out, ldo, scratch, 32, false);
}

#elif defined(PL_CPU_X86)
/* x86 outside 64-bit Linux: the tile state is never requested, so never used. */
bool pl_qg_amx_available(void) { return false; }
void pl_qg_amx_config(int kb) { (void)kb; }
void pl_qg_amx_release(void) {}
void pl_qg_amx_panel(const pl_qg_panel *P, const pl_qg_amx_rows *R, float *out, size_t ldo,
                     void *scratch) {
    (void)P, (void)R, (void)out, (void)ldo, (void)scratch;
}
#endif
