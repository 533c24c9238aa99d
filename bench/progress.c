/*
 * bench/progress.c - the progress bar (see progress.h).
 *
 * A frame: LABEL [##########....................] DONE/TOTAL UNIT  NOTE  RATE/s  ETA m:ss
 * RATE is done per second since the start; the ETA assumes that rate holds.
 */
#include "bench/progress.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { WIDTH = 30 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void pl_progress_start(pl_progress *p, bool wanted, const char *unit, uint64_t total) {
    memset(p, 0, sizeof *p);
    p->on = wanted && isatty(STDERR_FILENO);
    p->unit = unit;
    p->total = total;
    p->show_rate = true;
    p->t0 = now_s();
    p->last_draw = p->t0 - 1.0; /* the first update draws at once */
}

static void draw(pl_progress *p, double now) {
    uint64_t total = p->total > p->done ? p->total : p->done;
    bool complete = p->done == total;
    double el = now - p->t0;
    double rate = el > 0 ? (double)p->done / el : 0.0;
    size_t fill = total ? (size_t)((double)p->done / (double)total * WIDTH) : WIDTH;
    char bar[WIDTH + 1];
    for (size_t i = 0; i < WIDTH; i++) bar[i] = i < fill ? '#' : '.';
    bar[WIDTH] = '\0';
    fprintf(stderr, "\r%s%s[%s] %llu/%llu %s  ", p->label, p->label[0] ? " " : "", bar,
            (unsigned long long)p->done, (unsigned long long)total, p->unit);
    if (p->note[0]) fprintf(stderr, "%s  ", p->note);
    if (p->show_rate) fprintf(stderr, "%.0f/s  ", rate);
    if (complete) {
        fprintf(stderr, "ETA 0:00 ");
    } else if (p->done > 0 && rate > 0) {
        double eta = (double)(total - p->done) / rate;
        fprintf(stderr, "ETA %d:%02d ", (int)(eta / 60), (int)eta % 60);
    } else {
        fprintf(stderr, "ETA --:-- ");
    }
    fflush(stderr);
    p->last_draw = now;
    p->visible = true;
    p->complete_drawn = complete;
}

void pl_progress_update(pl_progress *p) {
    if (!p->on) return;
    bool complete = p->done >= p->total;
    if (complete && p->complete_drawn) return;
    double now = now_s();
    if (!complete && now - p->last_draw < 0.1) return;
    draw(p, now);
}

void pl_progress_finish(pl_progress *p) {
    if (!p->on) return;
    if (!p->complete_drawn || !p->visible) draw(p, now_s());
    fputc('\n', stderr);
    fflush(stderr);
    p->visible = false;
    p->on = false; /* a finished bar stays as drawn */
}

void pl_progress_clear(pl_progress *p) {
    if (!p->on || !p->visible) return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    p->visible = false;
    p->complete_drawn = false;
}
