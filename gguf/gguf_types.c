/*
 * gguf/gguf_types.c - the ggml tensor types by id with their block layouts, and their mapping
 * to the weight storage types of util/wtype.h (see gguf.h).
 *
 * The layouts are ggml's block structs (a scale or two in f16, then packed quants): e.g. Q8_0
 * is an f16 scale and 32 int8 (34 bytes per 32 elements), Q4_K a 256-element super-block of
 * d, dmin (f16), 12 bytes of 6-bit scales and 128 bytes of 4-bit quants (144). Every type is
 * listed, supported or not, so that any tensor's size can be checked against the file.
 */
#include <stddef.h>
#include <strings.h>

#include "gguf/gguf.h"

static const pl_gguf_type_info k_types[] = {
    {0, "F32", 1, 4},        {1, "F16", 1, 2},       {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},     {6, "Q5_0", 32, 22},    {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},     {9, "Q8_1", 32, 36},    {10, "Q2_K", 256, 84},
    {11, "Q3_K", 256, 110},  {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},  {15, "Q8_K", 256, 292}, {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74}, {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},  {21, "IQ3_S", 256, 110}, {22, "IQ2_S", 256, 82},
    {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},      {25, "I16", 1, 2},
    {26, "I32", 1, 4},       {27, "I64", 1, 8},      {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 56},  {30, "BF16", 1, 2},     {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66},  {39, "MXFP4", 32, 17},
};
#define N_TYPES (sizeof k_types / sizeof k_types[0])

const pl_gguf_type_info *pl_gguf_type_info_of(uint32_t id) {
    for (size_t i = 0; i < N_TYPES; i++)
        if (k_types[i].id == id) return &k_types[i];
    return NULL;
}

const pl_gguf_type_info *pl_gguf_type_by_name(const char *name) {
    for (size_t i = 0; name && i < N_TYPES; i++)
        if (strcasecmp(k_types[i].name, name) == 0) return &k_types[i];
    return NULL;
}

pl_wtype pl_gguf_wtype(const pl_gguf_type_info *ti) {
    if (!ti) return PL_WTYPE_NONE;
    for (int w = PL_WTYPE_NONE + 1; w < PL_WTYPE_COUNT; w++) {
        const pl_wtype_traits *tr = pl_wtype_traits_of((pl_wtype)w);
        if (tr && strcasecmp(tr->name, ti->name) == 0)
            /* a row of the same name but another layout is not this type */
            return tr->block_elems == ti->block_elems && tr->block_bytes == ti->block_bytes
                       ? (pl_wtype)w
                       : PL_WTYPE_NONE;
    }
    return PL_WTYPE_NONE;
}

const pl_gguf_type_info *pl_gguf_type_of_wtype(pl_wtype t) {
    const pl_wtype_traits *tr = pl_wtype_traits_of(t);
    const pl_gguf_type_info *ti = tr ? pl_gguf_type_by_name(tr->name) : NULL;
    return ti && pl_gguf_wtype(ti) == t ? ti : NULL;
}
