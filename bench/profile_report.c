/*
 * bench/profile_report.c - the profile summary table and the --profile plumbing every bench
 * command shares.
 *
 * The engine reports time per phase of a step (always) and per op kind of the forward pass
 * (only while profiling is on: each op is then followed by a backend sync so its time is its
 * own), with estimated bytes and FLOPs for matmul and attention. Here those become shares of
 * time and achieved rates, set against the ceilings measured by roofline.c in the same run:
 * the attainable rate of an op with arithmetic intensity I (FLOP/byte) is
 * min(GEMM peak, I x read bandwidth), and "% roof" is how much of that the op achieved.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench/bench_internal.h"
#include "cli/cli.h"

void pl_bench_profile_add(pl_profile *acc, const pl_profile *p) {
    for (int k = 0; k < p->n_phases && k < PL_PROFILE_MAX; k++) {
        acc->phases[k].name = p->phases[k].name;
        acc->phases[k].seconds += p->phases[k].seconds;
        acc->phases[k].calls += p->phases[k].calls;
        acc->phases[k].bytes += p->phases[k].bytes;
        acc->phases[k].flops += p->phases[k].flops;
    }
    if (p->n_phases > acc->n_phases) acc->n_phases = p->n_phases;
    for (int k = 0; k < p->n_ops && k < PL_PROFILE_MAX; k++) {
        acc->ops[k].name = p->ops[k].name;
        acc->ops[k].seconds += p->ops[k].seconds;
        acc->ops[k].calls += p->ops[k].calls;
        acc->ops[k].bytes += p->ops[k].bytes;
        acc->ops[k].flops += p->ops[k].flops;
    }
    if (p->n_ops > acc->n_ops) acc->n_ops = p->n_ops;
    acc->steps += p->steps;
    acc->step_seconds += p->step_seconds;
}

const pl_profile_entry *pl_bench_profile_op(const pl_profile *p, const char *name) {
    for (int k = 0; k < p->n_ops; k++)
        if (p->ops[k].name && !strcmp(p->ops[k].name, name)) return &p->ops[k];
    return NULL;
}

static double phase_seconds(const pl_profile *p, const char *name) {
    for (int k = 0; k < p->n_phases; k++)
        if (p->phases[k].name && !strcmp(p->phases[k].name, name)) return p->phases[k].seconds;
    return 0.0;
}

static double share(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

/* Achieved rates of an entry and their fractions of the ceilings (fractions 0 without roof). */
typedef struct rates {
    double gbs, gflops, intensity, roof_gflops, pct_bw, pct_peak, pct_roof;
} rates;

static rates rates_of(const pl_profile_entry *e, const pl_bench_roofline *roof) {
    rates r = {0};
    if (e->seconds <= 0) return r;
    r.gbs = e->bytes / e->seconds * 1e-9;
    r.gflops = e->flops / e->seconds * 1e-9;
    r.intensity = e->bytes > 0 ? e->flops / e->bytes : 0.0;
    if (roof && roof->read_gbs > 0 && roof->gemm_gflops > 0) {
        r.roof_gflops = fmin(roof->gemm_gflops, r.intensity * roof->read_gbs);
        r.pct_bw = share(r.gbs, roof->read_gbs);
        r.pct_peak = share(r.gflops, roof->gemm_gflops);
        r.pct_roof = share(r.gflops, r.roof_gflops);
    }
    return r;
}

void pl_bench_profile_print(FILE *f, const pl_profile *p, const pl_bench_roofline *roof) {
    double step = p->step_seconds, fwd = phase_seconds(p, "forward");
    fprintf(f, "Profile: %llu steps, %.3f s inside pl_engine_step\n",
            (unsigned long long)p->steps, step);
    fprintf(f, "%-14s %10s %8s %10s\n", "phase", "time (s)", "share", "calls");
    double phase_sum = 0;
    for (int k = 0; k < p->n_phases; k++) {
        const pl_profile_entry *e = &p->phases[k];
        phase_sum += e->seconds;
        fprintf(f, "%-14s %10.4f %7.1f%% %10llu\n", e->name, e->seconds, share(e->seconds, step),
                (unsigned long long)e->calls);
    }
    if (step - phase_sum > 1e-3 * step)
        fprintf(f, "%-14s %10.4f %7.1f%%\n", "(untimed)", step - phase_sum,
                share(step - phase_sum, step));

    double op_sum = 0;
    for (int k = 0; k < p->n_ops; k++) op_sum += p->ops[k].seconds;
    if (op_sum <= 0) {
        fprintf(f, "(no per-op times: profiling was off)\n");
        return;
    }
    fprintf(f, "\n%-14s %10s %8s %10s %9s %9s %8s %8s %8s\n", "op (forward)", "time (s)",
            "share", "calls", "GB/s", "GFLOP/s", "%BW", "%peak", "%roof");
    for (int k = 0; k < p->n_ops; k++) {
        const pl_profile_entry *e = &p->ops[k];
        if (e->calls == 0 && e->seconds <= 0) continue;
        fprintf(f, "%-14s %10.4f %7.1f%% %10llu", e->name, e->seconds, share(e->seconds, fwd),
                (unsigned long long)e->calls);
        if (e->bytes > 0 || e->flops > 0) {
            rates r = rates_of(e, roof);
            fprintf(f, " %9.2f %9.2f", r.gbs, r.gflops);
            if (roof) fprintf(f, " %7.1f%% %7.1f%% %7.1f%%", r.pct_bw, r.pct_peak, r.pct_roof);
        }
        fputc('\n', f);
    }
    if (fwd - op_sum > 1e-3 * fwd)
        fprintf(f, "%-14s %10.4f %7.1f%%\n", "(between ops)", fwd - op_sum,
                share(fwd - op_sum, fwd));
    if (roof)
        fprintf(f, "%%BW: of %.2f GB/s read bandwidth; %%peak: of %.2f GFLOP/s sgemm; %%roof: of "
                   "min(peak, intensity x bandwidth)\n", roof->read_gbs, roof->gemm_gflops);
}

static json_t *entry_json(const pl_profile_entry *e, double whole, const pl_bench_roofline *roof) {
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(e->name ? e->name : ""));
    json_object_set_new(o, "seconds", json_real(e->seconds));
    json_object_set_new(o, "share", json_real(whole > 0 ? e->seconds / whole : 0.0));
    json_object_set_new(o, "calls", json_integer((json_int_t)e->calls));
    if (e->bytes > 0 || e->flops > 0) {
        rates r = rates_of(e, roof);
        json_object_set_new(o, "bytes", json_real(e->bytes));
        json_object_set_new(o, "flops", json_real(e->flops));
        json_object_set_new(o, "gbs", json_real(r.gbs));
        json_object_set_new(o, "gflops", json_real(r.gflops));
        json_object_set_new(o, "flop_per_byte", json_real(r.intensity));
        if (roof) {
            json_object_set_new(o, "fraction_of_read_bw", json_real(r.pct_bw / 100.0));
            json_object_set_new(o, "fraction_of_gemm_peak", json_real(r.pct_peak / 100.0));
            json_object_set_new(o, "fraction_of_roof", json_real(r.pct_roof / 100.0));
        }
    }
    return o;
}

json_t *pl_bench_profile_json(const pl_profile *p, const pl_bench_roofline *roof) {
    json_t *o = json_object();
    double fwd = phase_seconds(p, "forward");
    json_object_set_new(o, "steps", json_integer((json_int_t)p->steps));
    json_object_set_new(o, "step_seconds", json_real(p->step_seconds));
    json_t *ph = json_array(), *ops = json_array();
    for (int k = 0; k < p->n_phases; k++)
        json_array_append_new(ph, entry_json(&p->phases[k], p->step_seconds, roof));
    for (int k = 0; k < p->n_ops; k++)
        json_array_append_new(ops, entry_json(&p->ops[k], fwd, roof));
    json_object_set_new(o, "phases", ph);
    json_object_set_new(o, "ops", ops);
    if (roof) json_object_set_new(o, "roofline", pl_bench_roofline_json(roof));
    return o;
}

/* ------------------------------------------------------------------------------------------
 * --profile on the bench commands
 * ---------------------------------------------------------------------------------------- */

int pl_bench_profiling_flag(pl_bench_profiling *p, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (cli_is(a, "--profile")) {
        if (*i + 1 >= argc || !argv[*i + 1][0]) {
            fprintf(stderr, "pagellm: --profile: missing value (the trace file to write)\n");
            return -1;
        }
        p->trace_path = argv[++*i];
        return 1;
    }
    if (cli_is(a, "--no-roofline")) {
        p->no_roofline = true;
        return 1;
    }
    return pl_bench_roofline_flag(&p->roof_opts, argc, argv, i);
}

int pl_bench_profiling_prepare(pl_bench_profiling *p, const pl_engine_config *cfg) {
    if (!p->trace_path || p->no_roofline) return 0;
    /* ceilings of the engine's thread count: a 1-thread engine against an all-core GEMM
     * peak would read as a kernel at a fraction of what it could do */
    if (p->roof_opts.n_threads == 0) p->roof_opts.n_threads = cfg->n_threads;
    if (pl_bench_roofline_measure(&p->roof_opts, &p->roof)) return 1;
    p->have_roof = true;
    return 0;
}

int pl_bench_profiling_start(pl_engine *e, const char *trace_path) {
    pl_engine_reset_profile(e);
    pl_status s = pl_engine_set_profiling(e, true, trace_path);
    if (s != PL_OK) {
        fprintf(stderr, "pagellm: --profile: %s (%s)\n", pl_last_error_as(PL_NAMING_FLAG), pl_status_name(s));
        return s == PL_ERR_IO ? 2 : 1;
    }
    return 0;
}

int pl_bench_profiling_stop(pl_engine *e, pl_profile *out) {
    pl_engine_get_profile(e, out);
    pl_status s = pl_engine_set_profiling(e, false, NULL);
    if (s != PL_OK) {
        fprintf(stderr, "pagellm: --profile: %s (%s)\n", pl_last_error_as(PL_NAMING_FLAG), pl_status_name(s));
        return 1;
    }
    return 0;
}
