/*
 * engine/profile.h - step phase timing and the Chrome trace-event writer.
 *
 * Phase times are always accumulated (two clock reads per phase). With profiling on, the
 * runner also times every op (syncing the backend after each), and with a trace file every
 * phase and op becomes a complete ("X") event: one track (tid) per phase, one per op kind,
 * plus counter ("C") events for batch size, tokens per step and KV usage.
 */
#ifndef PL_ENGINE_PROFILE_H
#define PL_ENGINE_PROFILE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/runner.h"
#include "util/timer.h"

typedef enum pl_phase {
    PL_PHASE_DRAIN, PL_PHASE_SCHEDULE, PL_PHASE_BATCH, PL_PHASE_FORWARD, PL_PHASE_SAMPLE,
    PL_PHASE_DETOKENIZE, PL_PHASE_OUTPUT, PL_PHASE_COUNT
} pl_phase;

typedef struct pl_profiler {
    bool on;                /* per-op timing */
    FILE *trace;            /* NULL: no trace file */
    bool trace_has_events;
    uint64_t t_origin_ns;   /* trace timestamps are relative to this */
    uint64_t phase_ns[PL_PHASE_COUNT];
    uint64_t phase_calls[PL_PHASE_COUNT];
    uint64_t steps;
    uint64_t step_ns;
} pl_profiler;

const char *pl_phase_name(pl_phase p);

/* Adds [t0, t1) to phase p (and writes its trace event). */
void pl_profiler_phase(pl_profiler *pr, pl_phase p, uint64_t t0, uint64_t t1);
/* Runs the statements (the rest of the arguments) as phase p of the step, timed. */
#define PL_PHASE(pr, p, ...)                                                                  \
    do {                                                                                      \
        uint64_t pl_phase_t0_ = pl_now_ns();                                                  \
        __VA_ARGS__;                                                                          \
        pl_profiler_phase((pr), (p), pl_phase_t0_, pl_now_ns());                              \
    } while (0)
/* The runner's per-op hook (ctx is the profiler). */
void pl_profiler_op(void *ctx, pl_op_kind k, uint64_t t0, uint64_t t1);
/* Counter events after a step. */
void pl_profiler_counters(pl_profiler *pr, uint64_t t, int batch_seqs, int batch_tokens,
                          double kv_usage);
/* Opens (truncating) a trace file; closes the previous one. */
pl_status pl_profiler_open_trace(pl_profiler *pr, const char *path);
void pl_profiler_close_trace(pl_profiler *pr);

#endif
