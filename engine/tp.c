/*
 * engine/tp.c - the tensor-parallel group: see tp.h.
 *
 * Start-up timeouts are long (loading a shard of a large model takes minutes); once every
 * rank is ready, the collectives wait --distributed-timeout. The agreement messages are fixed
 * records (hello) all-gathered from every rank.
 */
#include "engine/tp.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "util/alloc.h"
#include "util/log.h"
#include "util/threadpool.h"

/* How long ranks wait for each other while loading and making their runners. */
#define STARTUP_TIMEOUT_S 600.0



/* ---- which backend --------------------------------------------------------------------- */

pl_status pl_tp_resolve(const pl_engine_config *cfg, pl_dist_backend *out_kind,
                        int *out_launcher_rank, int *out_local_ranks) {
    int rank = 0, size = 1, local = 1;
    bool launched = pl_comm_launcher_rank(&rank, &size, &local);
    int tp = cfg->tensor_parallel_size;
    pl_dist_backend k = cfg->distributed_backend;
    if (k == PL_DIST_AUTO)
        k = !launched || size == 1 ? PL_DIST_THREADS
            : cfg->backend == PL_BACKEND_CUDA && pl_comm_have_nccl() ? PL_DIST_NCCL
                                                                   : PL_DIST_MPI;
    if (k == PL_DIST_THREADS) {
        if (launched && size > 1)
            return pl_fail(PL_ERR_INVALID_ARGUMENT,
                           "--distributed-backend threads: mpirun started %d ranks; with mpirun "
                           "use --distributed-backend mpi (or nccl)", size);
        rank = 0, local = tp;
    } else {
        if (!launched)
            return pl_fail(PL_ERR_INVALID_ARGUMENT,
                           "--distributed-backend %s: start the ranks with `mpirun -n %d "
                           "pagellm ...` (or use --distributed-backend threads)",
                           k == PL_DIST_NCCL ? "nccl" : "mpi", tp);
        if (size != tp)
            return pl_fail(PL_ERR_INVALID_ARGUMENT,
                           "--tensor-parallel-size = %d: mpirun started %d ranks; they must "
                           "be equal", tp, size);
        if (!pl_comm_have_mpi())
            return pl_comm_mpi_create(1.0, NULL); /* the stub's message */
        if (k == PL_DIST_NCCL && cfg->backend != PL_BACKEND_CUDA)
            return pl_fail(PL_ERR_INVALID_ARGUMENT,
                           "--distributed-backend nccl needs --backend cuda (NCCL moves GPU "
                           "memory); on the CPU use mpi");
        if (k == PL_DIST_NCCL && !pl_comm_have_nccl()) return pl_comm_nccl_create(NULL, 0, NULL, NULL);
    }
    *out_kind = k;
    if (out_launcher_rank) *out_launcher_rank = rank;
    if (out_local_ranks) *out_local_ranks = local;
    return PL_OK;
}

int pl_tp_threads_per_rank(const pl_engine_config *cfg) {
    if (cfg->n_threads > 0 || cfg->tensor_parallel_size <= 1) return cfg->n_threads;
    int n = pl_cpu_count() / pl_rank_local_ranks(cfg);
    return n > 0 ? n : 1;
}

/* ---- the start-up agreement ---------------------------------------------------------------- */

typedef struct hello {
    int32_t status;      /* pl_status of this rank's start so far */
    int32_t rank;
    int64_t blocks;      /* KV blocks its memory holds */
    int32_t shape[10];   /* limits and model dims: must be the same everywhere */
    char message[256];
} hello;

/* Everyone's status and blocks; PL_OK when every rank is fine and agrees on the shape, with
 * *out_blocks the smallest. Otherwise the first failing rank's message (this rank's own when
 * it is that rank). */
static pl_status agree(pl_comm *comm, pl_status st, int64_t blocks, const int32_t shape[10],
                       int *out_blocks, const char *what) {
    hello mine;
    memset(&mine, 0, sizeof mine);
    mine.status = st;
    mine.rank = comm->rank;
    mine.blocks = blocks;
    memcpy(mine.shape, shape, sizeof mine.shape);
    if (st != PL_OK) snprintf(mine.message, sizeof mine.message, "%s", pl_last_error());
    hello *all = pl_calloc((size_t)comm->size, sizeof *all);
    if (!all) return pl_fail(PL_ERR_OUT_OF_MEMORY, "tensor parallel: %s", what);
    pl_status s = pl_comm_all_gather(comm, &mine, sizeof mine, all);
    if (s != PL_OK) {
        pl_free(all);
        if (st != PL_OK) pl_fail(st, "%s", mine.message); /* our own reason is the one to tell */
        return st != PL_OK ? st : pl_fail_prefix(s, "tensor parallel: %s", what);
    }
    int64_t least = INT64_MAX;
    for (int r = 0; r < comm->size && s == PL_OK; r++) {
        hello *h = &all[r];
        h->message[sizeof h->message - 1] = '\0';
        if (h->status != PL_OK)
            s = pl_fail((pl_status)h->status, "%srank %d: %s", r == comm->rank ? "" : "",
                        r, h->message);
        else if (memcmp(h->shape, all[0].shape, sizeof h->shape) != 0)
            s = pl_fail(PL_ERR_INVALID_ARGUMENT,
                        "tensor parallel: rank %d runs another model or other limits than "
                        "rank 0 (run every rank with the same flags)", r);
        else if (h->blocks < least)
            least = h->blocks;
    }
    pl_free(all);
    if (s == PL_OK && out_blocks) *out_blocks = (int)least;
    return s;
}

static void shape_of(const pl_model *m, const pl_runner_limits *lim, int32_t out[10]) {
    const pl_model_config *c = &m->cfg;
    int32_t v[10] = {lim->max_tokens, lim->max_seqs, lim->max_blocks_per_seq, lim->block_size,
                     c->n_layers, c->dim, c->vocab_size, c->n_heads, c->n_kv_heads,
                     c->hidden_dim};
    memcpy(out, v, sizeof v);
}

/* The runner limits every rank derives from the config and the model, as engine.c does. */
static pl_runner_limits limits_of(const pl_engine_config *c, const pl_model *m) {
    int len = c->max_model_len ? c->max_model_len : m->cfg.max_seq_len;
    return (pl_runner_limits){.max_tokens = c->max_total_tokens, .max_seqs = c->max_batch_size,
                              .max_blocks_per_seq = (len + c->block_size - 1) / c->block_size,
                              .block_size = c->block_size};
}

static pl_plan_limits plan_limits(const pl_runner_limits *lim, const pl_model *m) {
    return (pl_plan_limits){.max_tokens = lim->max_tokens, .max_seqs = lim->max_seqs,
                            .max_blocks_per_seq = lim->max_blocks_per_seq,
                            .block_size = lim->block_size, .n_blocks = lim->n_blocks,
                            .vocab = m->cfg.vocab_size};
}

static void log_counters(const pl_comm *c, uint64_t steps, uint64_t tokens) {
    const pl_comm_stats *s = &c->stats;
    pl_log(PL_LOG_INFO,
           "tensor parallel: rank %d of %d: %llu steps, %llu tokens; all_reduce %llu calls %llu "
           "bytes; all_gather %llu calls %llu bytes; broadcast %llu calls %llu bytes; %.3f s in "
           "collectives", c->rank, c->size, (unsigned long long)steps, (unsigned long long)tokens,
           (unsigned long long)s->calls[PL_COMM_ALL_REDUCE],
           (unsigned long long)s->bytes[PL_COMM_ALL_REDUCE],
           (unsigned long long)s->calls[PL_COMM_ALL_GATHER],
           (unsigned long long)s->bytes[PL_COMM_ALL_GATHER],
           (unsigned long long)s->calls[PL_COMM_BROADCAST],
           (unsigned long long)s->bytes[PL_COMM_BROADCAST],
           (double)(s->ns[0] + s->ns[1] + s->ns[2] + s->ns[3]) * 1e-9);
}

/* ---- a rank other than 0 ------------------------------------------------------------------ */

/* A test hook, read once per rank: PAGELLM_FAULT_RANK=R:S[:hang] makes rank R fail as if it
 * died (a thread leaves without a word; a process kills itself with SIGKILL) or, with
 * ":hang", stopped (SIGSTOP; processes only) when its step S + 1 arrives, so the others'
 * timeouts and a server's answers can be tested end to end. Unset: off. */
typedef struct fault {
    uint64_t after; /* 0: off */
    bool hang;
} fault;

static fault fault_for(int rank) {
    fault f = {0};
    const char *v = getenv("PAGELLM_FAULT_RANK");
    int r = -1;
    unsigned long long after = 0;
    char mode[8] = "";
    if (v && sscanf(v, "%d:%llu:%7s", &r, &after, mode) >= 2 && r == rank && after > 0) {
        f.after = after;
        f.hang = !strcmp(mode, "hang");
    }
    return f;
}

static void fault_act(const fault *f, bool process) {
    if (!f->after || !process) return;
    pl_log(PL_LOG_ERROR, "tensor parallel: PAGELLM_FAULT_RANK: this rank %s now",
           f->hang ? "stops" : "dies");
    raise(f->hang ? SIGSTOP : SIGKILL);
}

/* Everything a follower does once it has its shard, backend and communicator (st: how getting
 * them went; a failure is told to the group at the first agreement). */
static pl_status follow(const pl_engine_config *cfg, pl_model *shard, pl_backend *be,
                        pl_comm *comm, pl_status st, bool process, uint64_t *out_steps,
                        uint64_t *out_tokens) {
    pl_runner_limits lim = limits_of(cfg, shard);
    int32_t shape[10];
    shape_of(shard, &lim, shape);
    int blocks = 0;
    if (st == PL_OK) st = pl_rank_pool_blocks(cfg, shard, be, &lim, &blocks);
    PL_TRY(agree(comm, st, blocks, shape, &lim.n_blocks, "agreeing on the KV pool"));
    pl_runner *r = NULL;
    pl_tp_link link = {0};
    pl_plan_limits pl = plan_limits(&lim, shard);
    st = pl_runner_create(shard, be, &lim, &r);
    if (st == PL_OK) st = pl_runner_set_tp(r, comm, NULL);
    if (st == PL_OK) st = pl_tp_link_init(&link, comm, &pl);
    st = agree(comm, st, 0, shape, NULL, "starting");
    if (st == PL_OK) {
        comm->timeout_s = cfg->distributed_timeout;
        fault f = fault_for(comm->rank);
        st = pl_runner_follow(r, &link, f.after, out_steps, out_tokens);
        if (st != PL_OK && f.after && *out_steps == f.after) {
            fault_act(&f, process);
            comm->broken = true; /* a thread that died says nothing to the others */
            comm->error[0] = '\0';
        }
    }
    pl_tp_link_deinit(&link);
    pl_runner_destroy(r);
    return st;
}

static void *thread_main(void *arg) {
    pl_tp_thread *t = arg;
    pl_backend *be = NULL;
    pl_status st = pl_rank_backend_create(&t->cfg, t->rank, pl_tp_threads_per_rank(&t->cfg), &be);
    st = follow(&t->cfg, t->shard, be, t->comm, st, false, &t->steps, &t->tokens);
    t->status = st;
    if (st != PL_OK) {
        snprintf(t->error, sizeof t->error, "%s", pl_last_error());
        pl_log(PL_LOG_ERROR, "tensor parallel: rank %d: %s", t->rank, t->error);
        /* rank 0 learns at once, not at its timeout (a broken communicator: it knows, or the
         * test hook's dead rank, which must say nothing) */
        if (!t->comm->broken) pl_comm_abort(t->comm, t->error);
    }
    t->stats = t->comm->stats;
    log_counters(t->comm, t->steps, t->tokens);
    pl_comm_destroy(t->comm);
    t->comm = NULL;
    pl_backend_destroy(be);
    pl_model_free(t->shard);
    t->shard = NULL;
    return NULL;
}

pl_status pl_tp_run_worker(const pl_engine_config *cfg) {
    pl_dist_backend kind;
    int rank = 0, local = 1;
    PL_TRY(pl_tp_resolve(cfg, &kind, &rank, &local));
    if (kind == PL_DIST_THREADS || rank == 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_engine_run_worker: this process is not a "
                       "rank other than 0 of an mpirun launch");
    pl_comm *mpi = NULL, *comm = NULL;
    PL_TRY(pl_comm_mpi_create(STARTUP_TIMEOUT_S, &mpi));
    pl_backend *be = NULL;
    pl_model *m = NULL;
    /* the device of a rank is cuda_device + its rank on this host */
    int local_rank = rank % (local > 0 ? local : 1);
    pl_status st = pl_rank_backend_create(cfg, local_rank, pl_tp_threads_per_rank(cfg), &be);
    if (st == PL_OK && kind == PL_DIST_NCCL)
        st = pl_comm_nccl_create(mpi, be->device, be->stream, &comm);
    if (st == PL_OK) {
        size_t avail;
        st = pl_rank_memory(cfg, be, &avail);
        pl_model_load_options mo = {.dtype = cfg->weight_dtype, .dummy_seed = cfg->dummy_seed};
        if (st == PL_OK)
            st = pl_model_load_within(cfg->model_path, &mo,
                                      be->is_host ? avail * (size_t)cfg->tensor_parallel_size
                                                  : 0, &m);
    }
    if (st == PL_OK) st = pl_model_shard(m, rank, cfg->tensor_parallel_size);
    pl_comm *c = comm ? comm : mpi;
    uint64_t steps = 0, tokens = 0;
    if (m || st != PL_OK) {
        /* without a model the shape is unknown: the failure is all the others need */
        pl_model blank = {0};
        st = follow(cfg, m ? m : &blank, be, c, st, true, &steps, &tokens);
    }
    if (st != PL_OK) pl_log(PL_LOG_ERROR, "tensor parallel: rank %d: %s", rank, pl_last_error());
    log_counters(c, steps, tokens);
    pl_comm_destroy(comm);
    pl_comm_destroy(mpi);
    pl_model_free(m);
    pl_backend_destroy(be);
    return st;
}

/* ---- rank 0 ------------------------------------------------------------------------------- */

static void tp_free(pl_tp *tp) {
    if (!tp) return;
    for (int i = 0; i < tp->size - 1 && tp->threads; i++) {
        pl_comm_destroy(tp->threads[i].comm);
        pl_model_free(tp->threads[i].shard);
    }
    pl_free(tp->threads);
    if (tp->link_on) pl_tp_link_deinit(&tp->link);
    pl_comm_destroy(tp->comm == tp->mpi ? NULL : tp->comm);
    pl_comm_destroy(tp->mpi);
    pl_free(tp);
}

static pl_status start_threads(const pl_engine_config *cfg, pl_model *m, pl_tp *tp) {
    pl_comm_threads_world *w;
    PL_TRY(pl_comm_threads_world_create(tp->size, STARTUP_TIMEOUT_S, &w));
    tp->threads = pl_calloc((size_t)tp->size - 1, sizeof *tp->threads);
    pl_status st = tp->threads ? pl_comm_threads_create(w, 0, &tp->comm)
                               : pl_fail(PL_ERR_OUT_OF_MEMORY, "tensor parallel: threads");
    for (int r = 1; r < tp->size && st == PL_OK; r++) {
        pl_tp_thread *t = &tp->threads[r - 1];
        t->rank = r;
        t->cfg = *cfg;
        st = pl_comm_threads_create(w, r, &t->comm);
        if (st == PL_OK) st = pl_model_shard_copy(m, r, tp->size, &t->shard);
    }
    if (st != PL_OK) { /* no thread started: the handles and shards go with tp */
        pl_comm_threads_world_release(w);
        return st;
    }
    for (int r = 1; r < tp->size; r++) {
        pl_tp_thread *t = &tp->threads[r - 1];
        if (pthread_create(&t->thread, NULL, thread_main, t) != 0) {
            pl_comm_abort(tp->comm, "rank 0 could not start every rank's thread");
            return pl_fail(PL_ERR_BACKEND, "tensor parallel: cannot start rank %d's thread", r);
        }
        t->started = true;
        tp->n_threads++;
    }
    snprintf(tp->info, sizeof tp->info, "threads: %d ranks, %s", tp->size, tp->comm->transport);
    return PL_OK;
}

static void join_threads(pl_tp *tp) {
    for (int i = 0; i < tp->size - 1 && tp->threads; i++) {
        pl_tp_thread *t = &tp->threads[i];
        if (!t->started) continue;
        pthread_join(t->thread, NULL);
        t->started = false;
    }
}

pl_status pl_tp_start(const pl_engine_config *cfg, pl_model *m, pl_backend *be, pl_tp **out) {
    *out = NULL;
    pl_tp *tp = pl_calloc(1, sizeof *tp);
    if (!tp) return pl_fail(PL_ERR_OUT_OF_MEMORY, "tensor parallel: state");
    tp->size = cfg->tensor_parallel_size;
    atomic_init(&tp->failed, false);
    int rank = 0;
    pl_status st = pl_tp_resolve(cfg, &tp->kind, &rank, NULL);
    if (st == PL_OK && rank != 0)
        st = pl_fail(PL_ERR_INVALID_ARGUMENT, "rank %d of the mpirun launch: only rank 0 makes "
                     "the engine; the others call pl_engine_run_worker (pagellm's commands do)",
                     rank);
    if (st == PL_OK && tp->kind == PL_DIST_THREADS) {
        st = start_threads(cfg, m, tp);
    } else if (st == PL_OK) {
        st = pl_comm_mpi_create(STARTUP_TIMEOUT_S, &tp->mpi);
        tp->comm = tp->mpi;
        if (st == PL_OK && tp->kind == PL_DIST_NCCL)
            st = pl_comm_nccl_create(tp->mpi, be->device, be->stream, &tp->comm);
        if (st == PL_OK)
            snprintf(tp->info, sizeof tp->info, "%s: %d ranks, %s",
                     tp->kind == PL_DIST_NCCL ? "nccl" : "mpi", tp->size, tp->comm->transport);
    }
    if (st == PL_OK) {
        pl_status s = pl_model_shard(m, 0, tp->size);
        if (s != PL_OK) { /* the others find the same split impossible; say it once for all */
            int32_t shape[10] = {0};
            agree(tp->comm, s, 0, shape, NULL, "sharding");
            st = s;
        }
    }
    if (st != PL_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", pl_last_error());
        pl_tp_stop(tp, NULL);
        return pl_fail(st, "%s", why);
    }
    *out = tp;
    return PL_OK;
}

pl_status pl_tp_agree_blocks(pl_tp *tp, pl_status st, const pl_model *m,
                             const pl_runner_limits *lim, int my_blocks, int *out_blocks) {
    int32_t shape[10];
    shape_of(m, lim, shape);
    return agree(tp->comm, st, my_blocks, shape, out_blocks, "agreeing on the KV pool");
}

pl_status pl_tp_connect(pl_tp *tp, const pl_engine_config *cfg, pl_runner *r,
                        const pl_model *m, const pl_runner_limits *lim, pl_status st) {
    pl_plan_limits pl = plan_limits(lim, m);
    if (st == PL_OK) st = pl_tp_link_init(&tp->link, tp->comm, &pl);
    if (st == PL_OK) tp->link_on = true;
    if (st == PL_OK) st = pl_runner_set_tp(r, tp->comm, &tp->link);
    int32_t shape[10];
    shape_of(m, lim, shape);
    PL_TRY(agree(tp->comm, st, 0, shape, NULL, "starting"));
    tp->comm->timeout_s = cfg->distributed_timeout;
    if (tp->mpi && tp->mpi != tp->comm) tp->mpi->timeout_s = cfg->distributed_timeout;
    PL_TRY(pl_tp_link_start_keepalive(&tp->link));
    pl_log(PL_LOG_INFO, "tensor parallel: %s", tp->info);
    return PL_OK;
}

void pl_tp_finish(pl_tp *tp, pl_runner *r) {
    if (!tp || tp->finished) return;
    tp->finished = true;
    if (tp->link_on) pl_tp_link_stop_keepalive(&tp->link);
    bool healthy = !atomic_load(&tp->failed) && tp->comm && !tp->comm->broken;
    if (healthy && r && tp->link_on && pl_runner_stop_followers(r) == PL_OK) {
        /* the others leave their loops and end on their own */
    } else if (tp->comm && tp->kind == PL_DIST_THREADS) {
        pl_comm_abort(tp->comm, "rank 0 is stopping after a failure");
    }
    /* mpi: after a failure the others learn at their next wait (no heartbeat comes any
     * more) or from mpirun when this process exits; MPI_Abort would end this process too */
    join_threads(tp);
    if (tp->comm) log_counters(tp->comm, tp->steps, tp->tokens);
}

void pl_tp_set_totals(pl_tp *tp, uint64_t steps, uint64_t tokens) {
    if (!tp) return;
    tp->steps = steps;
    tp->tokens = tokens;
}

void pl_tp_stop(pl_tp *tp, pl_runner *r) {
    if (!tp) return;
    pl_tp_finish(tp, r);
    tp_free(tp);
}

/* Reads the communicator's state under the link's lock (the keep-alive thread writes it
 * too); with `wait` false gives up when the lock is busy (a step is running: it will tell). */
static void check(pl_tp *tp, bool wait) {
    if (!tp || atomic_load(&tp->failed) || !tp->link_on) return;
    if (wait) pl_tp_link_lock(&tp->link);
    else if (pthread_mutex_trylock(&tp->link.mu) != 0) return;
    bool broken = tp->comm->broken && !atomic_load(&tp->failed);
    if (broken) {
        snprintf(tp->error, sizeof tp->error, "%s", tp->comm->error);
        pl_log(PL_LOG_ERROR, "tensor parallel: the group failed: %s", tp->error);
        atomic_store(&tp->failed, true);
    }
    pl_tp_link_unlock(&tp->link);
}

void pl_tp_check(pl_tp *tp) { check(tp, true); }

pl_status pl_tp_health(pl_tp *tp) {
    check(tp, false); /* a failure between steps (the keep-alive's) shows without one */
    if (!tp || !atomic_load(&tp->failed)) return PL_OK;
    return pl_fail(PL_ERR_BACKEND, "tensor parallel: %s", tp->error);
}
