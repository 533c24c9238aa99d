/*
 * server/req.c - a request in flight: references, its queue of stream events, the copies of
 * logprobs the stepping thread makes, and resuming its suspended connection.
 *
 * The one loop between this file and another is deliberate: the last pl_srv_req_unref hands
 * the request to the watcher (pl_srv_watch_bury, watch.c), and the watcher frees it with
 * pl_srv_req_destroy here once its epoll batch is over, because an event of that batch may
 * still name the request (watch.c says why). Freeing in place would be the use-after-free
 * this hand-off exists to prevent.
 */
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"

pl_srv_req *pl_srv_req_create(pl_srv *s) {
    pl_srv_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r);
        return NULL;
    }
    atomic_init(&r->refs, 1);
    r->srv = s;
    r->t_start = pl_srv_now();
    return r;
}

void pl_srv_req_ref(pl_srv_req *r) { atomic_fetch_add(&r->refs, 1); }

void pl_srv_req_unref(pl_srv_req *r) {
    if (atomic_fetch_sub(&r->refs, 1) == 1) pl_srv_watch_bury(r->srv, r);
}

void pl_srv_logprobs_free(pl_srv_logprobs *l) {
    free(l->entries);
    l->entries = NULL;
    l->n = 0;
}

bool pl_srv_logprobs_copy(const pl_token_logprobs *src, size_t n, pl_srv_logprobs *out) {
    out->entries = NULL;
    out->n = 0;
    if (!src || n == 0) return true;
    size_t tops = 0, texts = 0;
    for (size_t i = 0; i < n; i++) {
        tops += (size_t)src[i].n_top;
        texts += src[i].text ? strlen(src[i].text) + 1 : 0;
    }
    pl_token_logprobs *e = malloc(n * sizeof *e + tops * sizeof(pl_logprob) + texts);
    if (!e) return false;
    pl_logprob *t = (pl_logprob *)(e + n);
    char *x = (char *)(t + tops); /* the entries' texts, after the tops */
    for (size_t i = 0; i < n; i++) {
        e[i] = src[i];
        e[i].top = src[i].n_top > 0 ? t : NULL;
        if (src[i].n_top > 0) memcpy(t, src[i].top, (size_t)src[i].n_top * sizeof *t);
        t += src[i].n_top;
        if (src[i].text) {
            size_t len = strlen(src[i].text) + 1;
            memcpy(x, src[i].text, len);
            e[i].text = x;
            x += len;
        }
    }
    out->entries = e;
    out->n = n;
    return true;
}

void pl_srv_events_free(pl_srv_event *ev) {
    while (ev) {
        pl_srv_event *next = ev->next;
        free(ev);
        ev = next;
    }
}

pl_srv_event *pl_srv_req_take_events_locked(pl_srv_req *r, int max_n) {
    pl_srv_event *head = r->ev_head, *last = NULL;
    int n = 0;
    for (pl_srv_event *e = head; e && n < max_n; e = e->next) last = e, n++;
    if (!last) return NULL;
    r->ev_head = last->next;
    if (!r->ev_head) r->ev_tail = NULL;
    last->next = NULL;
    r->n_events -= n;
    return head;
}

void pl_srv_req_resume_locked(pl_srv_req *r) {
    if (!r->suspended) return;
    r->suspended = false;
    MHD_resume_connection(r->conn);
}

size_t pl_srv_req_abort_locked(pl_srv_req *r) {
    size_t n = 0;
    for (size_t p = 0; p < r->rq.n_prompts && r->engine_ids && r->submitted; p++)
        if (r->engine_ids[p] && r->samples_left[p] > 0) {
            pl_engine_abort(r->srv->e, r->engine_ids[p]); /* NOT_FOUND: finished meanwhile */
            n++;
        }
    return n;
}

void pl_srv_req_destroy(pl_srv_req *r) {
    if (!r) return;
    for (int i = 0; i < r->n_choices && r->choices; i++) {
        pl_srv_choice *c = &r->choices[i];
        free(c->text);
        free(c->out_ids);
        pl_srv_logprobs_free(&c->lp);
        pl_srv_logprobs_free(&c->prompt_lp);
        pl_reply_parser_free(c->reply);
    }
    free(r->choices);
    free(r->engine_ids);
    free(r->samples_left);
    pl_srv_events_free(r->ev_head);
    if (r->has_rq) pl_srv_request_free(&r->rq);
    free(r->body);
    free(r->out);
    pthread_mutex_destroy(&r->mu);
    free(r);
}
