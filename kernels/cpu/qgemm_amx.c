/*
 * kernels/cpu/qgemm_amx.c - the int8 GEMM's AMX micro-kernel: tiles of 32 activation rows x
 * 32 panel columns.
 *
 * Per block of kb k: A tiles (16 rows x kb bytes of the activations, two of them) and B tiles
 * (kb/4 rows x 64 bytes: 4 k of 16 columns, the panel as stored) feed four tdpbssd (signed x
 * signed: the panel is signed, no offset) into four 16 x 16 int32 C tiles, which are stored
 * and scaled into f32 rows in qgemm.h's order, so the result is the other kernels' bit for
 * bit. The scaling is per block because the activations' scales are per 32: it costs more
 * than the tile products themselves (4 x 16 rows of convert, multiply, multiply-add per
 * block), which bounds this kernel well below the tiles' peak.
 *
 * Linux hands out the tile data state only to a process that asked for it
 * (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); without that, or on a CPU without
 * AMX-INT8, pl_qg_amx_available says no and the ctx never picks this kernel. Each thread
 * loads its tile configuration before its first tile (pl_qg_amx_config) and releases the
 * tiles when its task ends.
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

/* f32 rows m of the accumulators (32 floats each) += C tile ci (16 x 16) scaled, columns
 * 16 nh .. 16 nh + 15. */
PL_INLINE PL_TARGET_AMX void scale_tile(const pl_qg_panel *P, const pl_qg_tile *T,
                                        const int32_t *ci, float *facc, int b, int m0, int nh,
                                        const int kb, const bool has_mn) {
    const __m512 sc = _mm512_loadu_ps(P->sc + (size_t)b * 32 + 16 * nh);
    const __m512 mn = has_mn ? _mm512_loadu_ps(P->mn + (size_t)b * 32 + 16 * nh)
                             : _mm512_setzero_ps();
    int rows = T->n_rows - m0 < 16 ? T->n_rows - m0 : 16;
    for (int r = 0; r < rows; r++) {
        int m = m0 + r;
        float *f = facc + (size_t)m * 32 + 16 * nh;
        __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(ci + 16 * r)), sc);
        __m512 a = _mm512_fmadd_ps(t, _mm512_set1_ps(T->d[m][b * kb / 32]), _mm512_loadu_ps(f));
        if (has_mn) a = _mm512_fnmadd_ps(mn, _mm512_set1_ps(T->ds[m][b]), a);
        _mm512_storeu_ps(f, a);
    }
}

/* The tile products of block b into C tiles stored at ci (4 x 256 int32). */
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

PL_INLINE PL_TARGET_AMX void scale_block(const pl_qg_panel *P, const pl_qg_tile *T,
                                         const int32_t *ci, float *facc, int b, const int kb,
                                         const bool has_mn, const bool two) {
    scale_tile(P, T, ci, facc, b, 0, 0, kb, has_mn);
    scale_tile(P, T, ci + 256, facc, b, 0, 1, kb, has_mn);
    if (two) {
        scale_tile(P, T, ci + 512, facc, b, 16, 0, kb, has_mn);
        scale_tile(P, T, ci + 768, facc, b, 16, 1, kb, has_mn);
    }
}

/* Block b's products go to one half of the int32 buffer while block b - 1's, stored by the
 * previous round, are scaled from the other: a vector load right after the tile store that
 * wrote its data waits for that store to complete (measured: ~1000 TSC cycles a block
 * unpipelined, 10x the products' own time). */
PL_INLINE PL_TARGET_AMX void tiles(const pl_qg_panel *P, const pl_qg_tile *T, size_t xq_stride,
                                   void *scratch, const int kb, const bool has_mn) {
    float *facc = scratch;                                      /* (32, 32) */
    int32_t *ci = (int32_t *)((unsigned char *)scratch + 4096); /* 2 x 4 x (16, 16) */
    const int b0 = T->k0 / kb, b1 = T->k1 / kb;
    const bool two = T->n_rows > 16;
    memset(facc, 0, (size_t)T->n_rows * 32 * sizeof(float));
    const int8_t *x0 = T->q[0];
    products(P, x0, xq_stride, b0, ci, kb, two);
    for (int b = b0 + 1; b < b1; b++) {
        products(P, x0, xq_stride, b, ci + 1024 * ((b - b0) % 2), kb, two);
        scale_block(P, T, ci + 1024 * ((b - 1 - b0) % 2), facc, b - 1, kb, has_mn, two);
    }
    scale_block(P, T, ci + 1024 * ((b1 - 1 - b0) % 2), facc, b1 - 1, kb, has_mn, two);
    const __mmask16 lo = P->n_valid >= 16 ? 0xffff : pl_avx512_mask(P->n_valid);
    const __mmask16 hi = P->n_valid >= 32 ? 0xffff : P->n_valid > 16 ? pl_avx512_mask(P->n_valid - 16) : 0;
    for (int m = 0; m < T->n_rows; m++) {
        __m512 a = _mm512_loadu_ps(facc + (size_t)m * 32), b = _mm512_loadu_ps(facc + (size_t)m * 32 + 16);
        if (T->accumulate) {
            a = _mm512_add_ps(_mm512_maskz_loadu_ps(lo, T->out[m]), a);
            b = _mm512_add_ps(_mm512_maskz_loadu_ps(hi, T->out[m] + 16), b);
        }
        _mm512_mask_storeu_ps(T->out[m], lo, a);
        _mm512_mask_storeu_ps(T->out[m] + 16, hi, b);
    }
}

PL_TARGET_AMX void pl_qg_kernel_amx(const pl_qg_panel *P, const pl_qg_tile *T, size_t xq_stride,
                                    void *scratch) {
    if (P->kb == 16)
        tiles(P, T, xq_stride, scratch, 16, false);
    else if (P->has_mn)
        tiles(P, T, xq_stride, scratch, 32, true);
    else
        tiles(P, T, xq_stride, scratch, 32, false);
}

#elif defined(PL_CPU_X86)
/* x86 outside 64-bit Linux: the tile state is never requested, so never used. */
bool pl_qg_amx_available(void) { return false; }
void pl_qg_amx_config(int kb) { (void)kb; }
void pl_qg_amx_release(void) {}
void pl_qg_kernel_amx(const pl_qg_panel *P, const pl_qg_tile *T, size_t xq_stride,
                      void *scratch) {
    (void)P, (void)T, (void)xq_stride, (void)scratch;
}
#endif
