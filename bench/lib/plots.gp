# Plots for bench/run.sh:
#   gnuplot -e "dir='OUTDIR'; plots='throughput latency'" bench/lib/plots.gp
# reads DIR/throughput.dat and DIR/latency.dat (written by report.py) and
# writes DIR/throughput.png and DIR/latency.png (only those named in plots).
if (!exists("dir")) dir = "."
if (!exists("plots")) plots = "throughput latency"

set datafile missing "?"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set key top right noenhanced
set xtics noenhanced rotate by -25 nomirror
set ytics nomirror
set border 3

if (strstrt(plots, "throughput") > 0) {
  set terminal pngcairo size 1100,560 font "sans,10" noenhanced
  set output dir."/throughput.png"
  set title "Throughput per scenario (wrk / redis-benchmark, 50 connections, 127.0.0.1)"
  set ylabel "thousand requests/s"
  set yrange [0:*]
  plot for [i=2:5] dir."/throughput.dat" using i:xtic(1) title columnheader(i)
  unset output
}

if (strstrt(plots, "latency") > 0) {
  set terminal pngcairo size 1300,620 font "sans,10" noenhanced
  set bmargin 7
  # room for the last (rotated) label
  set rmargin 12
  set output dir."/latency.png"
  # above the plot: the tallest bars (the cluster's) are at the right
  set key outside top center horizontal
  set title "Latency percentiles per scenario (log scale)"
  set ylabel "milliseconds"
  set logscale y
  set yrange [0.01:*]
  plot for [i=2:4] dir."/latency.dat" using i:xtic(1) title columnheader(i)
  unset output
}
