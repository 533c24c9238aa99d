# scripts/plot_sweep.gp - draws the CSV of `pagellm bench sweep` as PNG and SVG.
#
#   gnuplot -e "csv='sweep.csv'; out='docs/sweep'" scripts/plot_sweep.gp
#
# `pagellm bench sweep --plot PREFIX` runs this itself when gnuplot is installed (Debian:
# gnuplot-nox). Writes out.png and out.svg, each with two panels: throughput against
# max_batch_size (log2 axis), and against prompt length and output length.
# CSV columns (header line first): 1 sweep (batch|input_len|output_len), 2 max_batch_size,
# 3 input_len, 4 output_len, ..., 8 total_tokens_per_s, 9 output_tokens_per_s.

if (!exists("csv")) csv = 'sweep.csv'
if (!exists("out")) out = 'sweep'
if (!exists("plot_title")) plot_title = 'pagellm bench sweep'

set datafile separator ","
set grid
set key top left
set ylabel "tokens/s"
set yrange [0:*]
set style data linespoints

# A row belongs to a panel's line when its first column names that sweep; other rows are
# undefined (1/0) and skipped. A panel with no rows at all is left out (gnuplot refuses to plot
# nothing: "x range is invalid"), so `--sweep batch` and `--sweep lengths` draw one panel.
is(kind) = strcol(1) eq kind
n_batch = int(system("grep -c '^batch,' '".csv."' || true"))
n_len = int(system("grep -cE '^(input_len|output_len),' '".csv."' || true"))
n_panels = (n_batch > 0) + (n_len > 0)

do for [fmt in "png svg"] {
    if (fmt eq "png") {
        set terminal png size 1200,480 font ",10"
    } else {
        set terminal svg size 1200,480 dynamic font "sans,11" background rgb "white"
    }
    set output out.".".fmt
    set multiplot layout 1,n_panels title plot_title

    if (n_batch > 0) {
    set title "vs max batch size"
    set xlabel "max batch size"
    set logscale x 2
    plot csv skip 1 using (is("batch") ? $2 : 1/0):8 lw 2 pt 7 title "total tokens/s", \
         ''  skip 1 using (is("batch") ? $2 : 1/0):9 lw 2 pt 7 title "output tokens/s"
    unset logscale x
    }

    if (n_len > 0) {
    set title "vs length (other length fixed)"
    set xlabel "length (tokens)"
    plot csv skip 1 using (is("input_len") ? $3 : 1/0):8 lw 2 pt 7 title "total tok/s vs prompt len", \
         ''  skip 1 using (is("input_len") ? $3 : 1/0):9 lw 2 pt 7 title "output tok/s vs prompt len", \
         ''  skip 1 using (is("output_len") ? $4 : 1/0):8 lw 2 pt 5 title "total tok/s vs output len", \
         ''  skip 1 using (is("output_len") ? $4 : 1/0):9 lw 2 pt 5 title "output tok/s vs output len"
    }

    unset multiplot
    set output
}
