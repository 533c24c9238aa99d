/*
 * bench/bench_plot.c - a small SVG line chart writer.
 *
 * The sweep's plot is drawn by gnuplot (scripts/plot_sweep.gp) when it is installed; this
 * writer is the fallback so that a sweep always leaves a picture. It draws panels side by
 * side, each with axes, "nice" ticks (1, 2, 5 x 10^k; powers of two on a log2 axis), one
 * polyline with markers per series and a legend. Points with a non-finite or (log axis)
 * non-positive coordinate are skipped.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench/bench_internal.h"

/* Panel geometry in pixels; the bottom margin holds the x labels and a two-column legend
 * (up to four series) so that no legend covers data. */
enum { PANEL_W = 560, PANEL_H = 440, TITLE_H = 36, ML = 72, MR = 20, MT = 36, MB = 96 };

static void xml_text(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* A tick step of 1, 2 or 5 x 10^k giving about `want` intervals over span. */
static double nice_step(double span, int want) {
    if (!(span > 0)) return 1.0;
    double raw = span / want, mag = pow(10.0, floor(log10(raw)));
    double r = raw / mag;
    return (r <= 1.0 ? 1.0 : r <= 2.0 ? 2.0 : r <= 5.0 ? 5.0 : 10.0) * mag;
}

static bool usable(const pl_bench_panel *p, double x, double y) {
    return isfinite(x) && isfinite(y) && (!p->log2_x || x > 0);
}

static void fmt_num(char *buf, size_t cap, double v) {
    if (fabs(v) >= 1e4 || (v != 0 && fabs(v) < 1e-2))
        snprintf(buf, cap, "%.3g", v);
    else
        snprintf(buf, cap, "%g", v);
}

static void panel(FILE *f, const pl_bench_panel *p, double ox, double oy) {
    double xmin = INFINITY, xmax = -INFINITY, ymax = 0;
    for (size_t s = 0; s < p->n_series; s++)
        for (size_t i = 0; i < p->series[s].n; i++) {
            double x = p->series[s].x[i], y = p->series[s].y[i];
            if (!usable(p, x, y)) continue;
            double tx = p->log2_x ? log2(x) : x;
            if (tx < xmin) xmin = tx;
            if (tx > xmax) xmax = tx;
            if (y > ymax) ymax = y;
        }
    if (!(xmin <= xmax)) xmin = 0, xmax = 1;
    if (xmax - xmin < 1e-12) xmin -= 0.5, xmax += 0.5;
    double ystep = nice_step(ymax > 0 ? ymax : 1.0, 5);
    double ytop = ceil((ymax > 0 ? ymax : 1.0) / ystep) * ystep;
    double pw = PANEL_W - ML - MR, ph = PANEL_H - MT - MB;
    double x0 = ox + ML, y0 = oy + MT; /* plot area's top left */
#define PX(tx) (x0 + ((tx) - xmin) / (xmax - xmin) * pw)
#define PY(y) (y0 + ph - (y) / ytop * ph)

    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"14\">",
            ox + PANEL_W / 2.0, oy + 22.0);
    xml_text(f, p->title);
    fputs("</text>\n", f);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
               "stroke=\"#333\"/>\n", x0, y0, pw, ph);
    char num[32];
    for (double y = 0; y <= ytop + ystep * 1e-9; y += ystep) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x0,
                PY(y), x0 + pw, PY(y));
        fmt_num(num, sizeof num, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\">%s</text>\n",
                x0 - 6, PY(y) + 4, num);
    }
    if (p->log2_x) {
        for (double t = ceil(xmin); t <= xmax + 1e-9; t += 1) {
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                    PX(t), y0, PX(t), y0 + ph);
            fmt_num(num, sizeof num, exp2(t));
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"11\">%s"
                       "</text>\n", PX(t), y0 + ph + 16, num);
        }
    } else {
        double step = nice_step(xmax - xmin, 6);
        for (double t = ceil(xmin / step) * step; t <= xmax + step * 1e-9; t += step) {
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                    PX(t), y0, PX(t), y0 + ph);
            fmt_num(num, sizeof num, t);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"11\">%s"
                       "</text>\n", PX(t), y0 + ph + 16, num);
        }
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\">", x0 + pw / 2,
            y0 + ph + 38);
    xml_text(f, p->xlabel);
    fprintf(f, "</text>\n<text transform=\"translate(%.1f,%.1f) rotate(-90)\" "
               "text-anchor=\"middle\" font-size=\"12\">", ox + 16, y0 + ph / 2);
    xml_text(f, p->ylabel);
    fputs("</text>\n", f);

    for (size_t s = 0; s < p->n_series; s++) {
        const pl_bench_series *se = &p->series[s];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", se->color);
        for (size_t i = 0; i < se->n; i++) {
            if (!usable(p, se->x[i], se->y[i])) continue;
            double tx = p->log2_x ? log2(se->x[i]) : se->x[i];
            fprintf(f, "%.1f,%.1f ", PX(tx), PY(se->y[i]));
        }
        fputs("\"/>\n", f);
        for (size_t i = 0; i < se->n; i++) {
            if (!usable(p, se->x[i], se->y[i])) continue;
            double tx = p->log2_x ? log2(se->x[i]) : se->x[i];
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", PX(tx),
                    PY(se->y[i]), se->color);
        }
        double lx = x0 + (double)(s % 2) * pw / 2, ly = y0 + ph + 60 + 16.0 * (double)(s / 2);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                   "stroke-width=\"2\"/>\n", lx, ly - 4, lx + 20, ly - 4, se->color);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">", lx + 26, ly);
        xml_text(f, se->name);
        fputs("</text>\n", f);
    }
#undef PX
#undef PY
}

bool pl_bench_svg_write(const char *path, const char *title, const pl_bench_panel *panels,
                        size_t n_panels) {
    FILE *f = fopen(path, "w");
    if (!f) return false;
    int w = PANEL_W * (int)(n_panels ? n_panels : 1), h = PANEL_H + TITLE_H;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", w, h, w, h);
    fprintf(f, "<text x=\"%d\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">", w / 2);
    xml_text(f, title);
    fputs("</text>\n", f);
    for (size_t k = 0; k < n_panels; k++) panel(f, &panels[k], (double)k * PANEL_W, TITLE_H);
    fputs("</svg>\n", f);
    bool ok = !ferror(f);
    return fclose(f) == 0 && ok;
}
