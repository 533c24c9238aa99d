/*
 * engine/profile.c - phase accounting, the public profiling calls and the trace writer.
 *
 * The trace is the JSON array form of the Chrome trace-event format: "[" then events joined by
 * ",\n" then "]". Timestamps and durations are microseconds with nanosecond fractions.
 */
#include "engine/profile.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/fields.h"
#include "util/timer.h"

static const char *const phase_names[PL_PHASE_COUNT] = {
    "drain", "schedule", "build_batch", "forward", "sample", "detokenize", "output",
};

const char *pl_phase_name(pl_phase p) {
    return (p >= 0 && p < PL_PHASE_COUNT) ? phase_names[p] : "unknown";
}

static void event(pl_profiler *pr, const char *fmt_body, ...) PL_PRINTF(2, 3);
static void event(pl_profiler *pr, const char *fmt_body, ...) {
    if (!pr->trace) return;
    fputs(pr->trace_has_events ? ",\n" : "\n", pr->trace);
    va_list ap;
    va_start(ap, fmt_body);
    vfprintf(pr->trace, fmt_body, ap);
    va_end(ap);
    pr->trace_has_events = true;
}

static double us(const pl_profiler *pr, uint64_t t) {
    return (double)(t - pr->t_origin_ns) / 1000.0;
}

void pl_profiler_phase(pl_profiler *pr, pl_phase p, uint64_t t0, uint64_t t1) {
    pr->phase_ns[p] += t1 - t0;
    pr->phase_calls[p]++;
    if (pr->trace)
        event(pr, "{\"name\":\"%s\",\"cat\":\"phase\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,"
                  "\"ts\":%.3f,\"dur\":%.3f}",
              phase_names[p], 1 + (int)p, us(pr, t0), (double)(t1 - t0) / 1000.0);
}

void pl_profiler_op(void *ctx, pl_op_kind k, uint64_t t0, uint64_t t1) {
    pl_profiler *pr = ctx;
    if (pr->trace)
        event(pr, "{\"name\":\"%s\",\"cat\":\"op\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,"
                  "\"ts\":%.3f,\"dur\":%.3f}",
              pl_op_kind_name(k), 100 + (int)k, us(pr, t0), (double)(t1 - t0) / 1000.0);
}

void pl_profiler_counters(pl_profiler *pr, uint64_t t, int batch_seqs, int batch_tokens,
                          double kv_usage) {
    if (!pr->trace) return;
    event(pr, "{\"name\":\"batch\",\"ph\":\"C\",\"pid\":1,\"ts\":%.3f,"
              "\"args\":{\"sequences\":%d,\"tokens\":%d}}", us(pr, t), batch_seqs, batch_tokens);
    event(pr, "{\"name\":\"kv_usage\",\"ph\":\"C\",\"pid\":1,\"ts\":%.3f,"
              "\"args\":{\"fraction\":%.4f}}", us(pr, t), kv_usage);
}

pl_status pl_profiler_open_trace(pl_profiler *pr, const char *path) {
    pl_profiler_close_trace(pr);
    FILE *f = fopen(path, "w");
    if (!f) return pl_fail(PL_ERR_IO, "trace %s: %s", path, strerror(errno));
    pr->trace = f;
    pr->trace_has_events = false;
    pr->t_origin_ns = pl_now_ns();
    fputs("[", f);
    event(pr, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"pagellm\"}}");
    for (int p = 0; p < PL_PHASE_COUNT; p++)
        event(pr, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,"
                  "\"args\":{\"name\":\"phase %s\"}}", 1 + p, phase_names[p]);
    for (int k = 0; k < PL_OP_COUNT; k++)
        event(pr, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,"
                  "\"args\":{\"name\":\"op %s\"}}", 100 + k, pl_op_kind_name((pl_op_kind)k));
    return PL_OK;
}

void pl_profiler_close_trace(pl_profiler *pr) {
    if (!pr->trace) return;
    fputs("\n]\n", pr->trace);
    fclose(pr->trace);
    pr->trace = NULL;
}

/* ---- public calls -------------------------------------------------------------------- */

pl_status pl_engine_set_profiling(pl_engine *e, bool on, const char *trace_path) {
    if (!e) return pl_fail(PL_ERR_INVALID_ARGUMENT, "set_profiling: engine is NULL");
    pl_profiler *pr = &e->prof;
    if (on && trace_path) PL_TRY(pl_profiler_open_trace(pr, trace_path));
    if (!on) pl_profiler_close_trace(pr);
    pr->on = on;
    pl_runner_set_profiling(e->runner, on);
    return PL_OK;
}

void pl_engine_reset_profile(pl_engine *e) {
    if (!e) return;
    pl_profiler *pr = &e->prof;
    memset(pr->phase_ns, 0, sizeof pr->phase_ns);
    memset(pr->phase_calls, 0, sizeof pr->phase_calls);
    pr->steps = 0;
    pr->step_ns = 0;
    pl_runner_reset_profile(e->runner);
}

void pl_engine_get_profile_sized(const pl_engine *e, pl_profile *dst, size_t dst_size) {
    if (!dst) return;
    pl_profile p = {.struct_size = sizeof p}, *out = &p;
    if (e) {
        const pl_profiler *pr = &e->prof;
        for (int i = 0; i < PL_PHASE_COUNT; i++)
            out->phases[out->n_phases++] = (pl_profile_entry){
                .name = phase_names[i], .seconds = (double)pr->phase_ns[i] * 1e-9,
                .calls = pr->phase_calls[i]};
        pl_runner_profile rp;
        pl_runner_get_profile(e->runner, &rp);
        for (int k = 0; k < PL_OP_COUNT; k++) {
            pl_profile_entry *o = &out->ops[out->n_ops++];
            *o = (pl_profile_entry){.name = pl_op_kind_name((pl_op_kind)k),
                                    .seconds = (double)rp.ns[k] * 1e-9, .calls = rp.calls[k]};
            if (k == PL_OP_MATMUL) {
                o->bytes = rp.matmul_bytes;
                o->flops = rp.matmul_flops;
            } else if (k == PL_OP_ATTENTION) {
                o->bytes = rp.attn_bytes;
                o->flops = rp.attn_flops;
            }
        }
        out->steps = pr->steps;
        out->step_seconds = (double)pr->step_ns * 1e-9;
    }
    pl_fields_fill_out(dst, dst_size, &p, sizeof p);
}

size_t pl_engine_weight_bytes(const pl_engine *e) { return e ? pl_model_weight_bytes(e->model) : 0; }
size_t pl_engine_matmul_params(const pl_engine *e) { return e ? pl_model_matmul_params(e->model) : 0; }
