/*
 * kernels/cpu/qgemm.h - the int8 GEMM's parts (qgemm.c drives them): weight panels unpacked
 * to int8 tiles, tiles of activation rows, and the micro-kernels.
 *
 * The product, per output (activation row m, weight row n), over blocks b of kb elements
 * (kb = 32; 16 for Q6_K, whose scales change every 16):
 *     out = sum_b [ d_m(b) * sc_n(b) * I(b) - mn_n(b) * ds_m(b) ]
 * with I(b) = sum_{i in b} L_n,i * q_m,i the exact integer dot product of the weight levels
 * (offset removed) and the activations' int8 values, d_m the activation block scale (per 32),
 * sc_n the weight block scale, and for Q4_K/Q5_K mn_n the block's min (dmin * m) and ds_m =
 * d_m * sum q. K is walked in chunks of PL_QG_KC (the last one shorter): per chunk acc starts
 * at 0 and every kernel adds, per block and in this order, t = (float)I * sc_n; acc =
 * fma(t, d_m, acc); then acc = fma(-mn_n, ds_m, acc); then out = acc (first chunk) or out +
 * acc. The integer sums are exact and the f32 steps the same, so every kernel gives the same
 * bits. The chunks keep a panel's slice of weights (48 x 256 bytes for the 512-bit kernel) in
 * L1 while every tile of activation rows passes over it.
 *
 * A panel holds nr weight rows (columns of the output) over all K:
 *   lev  K/4 steps x nr columns x 4 bytes: the levels of k = 4s .. 4s+3 of column n at
 *        (s * nr + n) * 4, so one vector load gives 4 consecutive k of 16 (8) columns, what
 *        vpdpbusd and an AMX B tile take. Unsigned with the type's offset (Q8_0 +128, Q4_0 8,
 *        Q6_K 32: the kernels start each block's sums from -offset * sum q, a shift of the
 *        activations' block sums), or signed without it (AMX's tdpbssd; AVX2's Q8_0, which
 *        vpmaddubsw would saturate unsigned).
 *   sc   K/kb x nr f32, block b of column n at b * nr + n.
 *   mn   K/32 x nr f32 (Q4_K/Q5_K only).
 * Columns beyond the weight's rows are zero (levels, scales, mins): their outputs are never
 * stored.
 */
#ifndef PL_KERNELS_CPU_QGEMM_H
#define PL_KERNELS_CPU_QGEMM_H

#include "kernels/cpu/cpu.h"

/* One product of the int8 GEMM: out (n_rows rows, ldo floats apart) = the activation rows
 * times w^T, w (d_out, K) of the quantised type wt. */
typedef struct pl_cpu_qgemm_part {
    float *out;
    size_t ldo;
    const void *w;
    pl_wtype wt;
    int d_out;
} pl_cpu_qgemm_part;

/* Whether kernel k may run on this ctx (the CPU has it and the ctx's ISA flags allow it). */
bool pl_cpu_qgemm_usable(const pl_cpu_ctx *c, pl_cpu_qgemm_kernel k);
/* The kernel a call on these parts runs: qgemm_force when usable, else the fastest usable for
 * their types (AMX unless a part is Q6_K, the 512-bit VNNI kernel ahead of it there). */
pl_cpu_qgemm_kernel pl_cpu_qgemm_pick(const pl_cpu_ctx *c, const pl_cpu_qgemm_part *parts,
                                      int n_parts);
const char *pl_cpu_qgemm_kernel_name(pl_cpu_qgemm_kernel k);

/* The int8 GEMM: row i of every part's out = activation row rows[i] of a (rows NULL: row i)
 * times the part's w^T, for i < n_rows, all parts in one pool call. a must hold the natural
 * layout and PL_CPU_QA_SUMS. Threads split each part's output columns into panels: a panel's
 * weight rows are unpacked once into int8 tiles (qgemm_pack.c) and multiplied with every
 * activation row by the kernel's register-blocked tiles (qgemm_kern.c, qgemm_amx.c). A row's
 * result does not depend on the other rows, nor on the kernel: every kernel sums the same
 * exact integer products per block and applies the scales in the same f32 order. */
pl_status pl_cpu_qgemm(pl_cpu_ctx *c, const pl_cpu_qact *a, const int32_t *rows, int n_rows,
                       const pl_cpu_qgemm_part *parts, int n_parts);

#define PL_QG_MR_MAX 4 /* rows of the vector kernels' tiles (AMX walks its own: pl_qg_amx_panel) */

typedef struct pl_qg_panel {
    int nr;       /* columns: a multiple of the kernel's vector width */
    int n_valid;  /* of them backed by weight rows */
    int K;
    int kb;       /* 32, or 16 (Q6_K) */
    int shift;    /* unsigned levels: log2 of the offset (0: none); signed: 0 */
    bool has_mn;  /* Q4_K/Q5_K */
    bool is_signed;
    uint8_t *lev; /* (K/4, nr, 4) */
    float *sc;    /* (K/kb, nr) */
    float *mn;    /* (K/32, nr), has_mn only */
} pl_qg_panel;

/* Bytes of a panel of nr columns over K (64-byte aligned parts). */
size_t pl_qg_panel_bytes(int nr, int K);

/* Lays out a panel of nr columns for type t in buf (pl_qg_panel_bytes(nr, K) bytes, 64-byte
 * aligned) and unpacks n_valid weight rows starting at w (row_bytes apart) into it: isa
 * AVX2 or above uses vector code (the same bytes). */
void pl_qg_pack(pl_cpu_isa isa, const uint8_t *w, size_t row_bytes, pl_wtype t, int n_valid,
                int nr, int K, bool is_signed, void *buf, pl_qg_panel *P);

/* k per chunk (a multiple of 256: whole K-quant super-blocks). */
#define PL_QG_KC 256

/* Up to PL_QG_MR_MAX activation rows and their outputs (the panel's first column), over the
 * chunk k0 .. k1 - 1 (k0 a multiple of PL_QG_KC, k1 of 32). */
typedef struct pl_qg_tile {
    int n_rows;
    int k0, k1;
    bool accumulate; /* out += this chunk's sums (false: out = them) */
    const int8_t *q[PL_QG_MR_MAX];
    const float *d[PL_QG_MR_MAX];    /* per 32 */
    const float *ds[PL_QG_MR_MAX];   /* per 32 */
    const int32_t *sn[PL_QG_MR_MAX]; /* minus the block sums, per kb */
    float *out[PL_QG_MR_MAX];
} pl_qg_tile;

/* The micro-kernels: out[m][0 .. n_valid) for the tile's rows (at most the kernel's mr) and
 * the panel (nr the kernel's). */
void pl_qg_kernel_scalar(const pl_qg_panel *P, const pl_qg_tile *T);
#ifdef PL_CPU_X86
void pl_qg_kernel_avx2(const pl_qg_panel *P, const pl_qg_tile *T);
void pl_qg_kernel_avxvnni(const pl_qg_panel *P, const pl_qg_tile *T);
void pl_qg_kernel_vnni512(const pl_qg_panel *P, const pl_qg_tile *T);
/* The AMX kernel's rows: the call's activation rows gathered by qgemm.c and padded with zero
 * rows to whole 32-row tiles (int8 values xq_stride apart), and their scales d and ds (K/32
 * floats a row, n_rows rows). */
typedef struct pl_qg_amx_rows {
    int n_rows;
    const int8_t *xq;
    size_t xq_stride;
    const float *d, *ds;
} pl_qg_amx_rows;
/* AMX: out (row m at out + m * ldo, from the panel's first column) = every row of R times the
 * panel, k in chunks of PL_QG_KC and the scales in qgemm.h's order as the other kernels (same
 * bits); its own loop over the 32-row tiles, so one tile's last products are scaled while the
 * next tile's are made. scratch: PL_QG_AMX_SCRATCH bytes, 64-byte aligned. */
void pl_qg_amx_panel(const pl_qg_panel *P, const pl_qg_amx_rows *R, float *out, size_t ldo,
                     void *scratch);
/* Blocks per group of the AMX kernel's tile products (scaled a group at a time: a row's f32
 * accumulators stay in a register through a group), and its scratch: the f32 accumulators
 * and two groups of int32 C tiles. */
#define PL_QG_AMX_G 4
#define PL_QG_AMX_SCRATCH (4096 * (1 + 2 * PL_QG_AMX_G))
/* Whether the CPU has AMX-INT8 and Linux lets this process use the tiles (asked once). */
bool pl_qg_amx_available(void);
/* Loads this thread's tile configuration for blocks of kb (32 or 16); kept until the next. */
void pl_qg_amx_config(int kb);
/* Releases this thread's tiles (their state is then not saved at context switches). */
void pl_qg_amx_release(void);
#endif

/* Columns per panel and rows per tile of kernel k. */
int pl_qg_nr(pl_cpu_qgemm_kernel k);
int pl_qg_mr(pl_cpu_qgemm_kernel k);

#endif
