# scripts/plot_serve_sweep.gp - draws the CSV of scripts/bench_serve_sweep.py as PNG and SVG.
#
#   gnuplot -e "csv='serve-sweep.csv'; out='docs/serve-sweep'" scripts/plot_serve_sweep.gp
#
# Two panels against the request rate (one point per rate, evenly spaced and labelled, so that
# "inf" has a place): TTFT (log scale: it grows by orders of magnitude once the server is
# saturated) and TPOT, each as mean, median and P99.
# CSV columns (header line first): 1 request_rate, ..., 9-11 mean/median/p99 TTFT (ms),
# 12-14 mean/median/p99 TPOT (ms), 15-17 ITL, 18-20 E2EL.

if (!exists("csv")) csv = 'serve-sweep.csv'
if (!exists("out")) out = 'serve-sweep'
if (!exists("plot_title")) {
    plot_title = 'pagellm bench serve against pagellm serve: latency vs request rate'
}

set datafile separator ","
set grid
set key top left
set style data linespoints
set xlabel "request rate (req/s, Poisson)"
set offsets 0.3, 0.3, 0, 0

do for [fmt in "png svg"] {
    if (fmt eq "png") {
        set terminal png size 1200,480 font ",10"
    } else {
        set terminal svg size 1200,480 dynamic font "sans,11" background rgb "white"
    }
    set output out.".".fmt
    set multiplot layout 1,2 title plot_title

    set title "time to first token"
    set ylabel "TTFT (ms)"
    set logscale y
    plot csv skip 1 using 0:9:xtic(1) lw 2 pt 7 title "mean", \
         ''  skip 1 using 0:10 lw 2 pt 7 title "median", \
         ''  skip 1 using 0:11 lw 2 pt 7 title "P99"
    unset logscale y

    set title "time per output token (after the first)"
    set ylabel "TPOT (ms)"
    set yrange [0:*]
    plot csv skip 1 using 0:12:xtic(1) lw 2 pt 7 title "mean", \
         ''  skip 1 using 0:13 lw 2 pt 7 title "median", \
         ''  skip 1 using 0:14 lw 2 pt 7 title "P99"
    set autoscale y

    unset multiplot
    set output
}
