/*
 * bench/progress.h - the one-line progress bar the long-running commands draw on stderr.
 *
 * The bar fills by the count it prints and names ("1200/4096 output tokens"), so what it
 * shows and how full it is cannot disagree. It is drawn only when stderr is a terminal (and
 * the caller wants it): piped or redirected output never holds a bar. Frames are redrawn in
 * place with "\r" at most every 0.1 s; the frame where done reaches total is drawn at once
 * and exactly once, and pl_progress_finish ends the line.
 *
 * Callers own the struct (no allocation) and write done, total, label and note directly
 * between draws; total may shrink while running (a request that stops early gives back its
 * unused tokens), never below done.
 */
#ifndef PL_BENCH_PROGRESS_H
#define PL_BENCH_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct pl_progress {
    bool on;             /* drawing: wanted and stderr is a terminal */
    const char *unit;    /* what done and total count, plural ("output tokens") */
    uint64_t done, total;
    char label[96];      /* before the bar ("iteration 3/12"); may be empty */
    char note[64];       /* after the count ("3/32 requests"); may be empty */
    bool show_rate;      /* print done per second (true after start) */
    double t0, last_draw;
    bool visible;        /* a frame is on the terminal's current line */
    bool complete_drawn; /* the frame with done == total has been drawn */
} pl_progress;

/* Starts a bar counting unit up to total. wanted false (or stderr not a terminal) gives a
 * bar whose calls do nothing. */
void pl_progress_start(pl_progress *p, bool wanted, const char *unit, uint64_t total);
/* Draws the current state if 0.1 s passed since the last frame, or if done reached total. */
void pl_progress_update(pl_progress *p);
/* Draws the final state unless it is already on screen, and ends the line. */
void pl_progress_finish(pl_progress *p);
/* Erases the bar's line, so that other output to the same terminal starts on a clean line;
 * the next update draws it again. */
void pl_progress_clear(pl_progress *p);

#endif
