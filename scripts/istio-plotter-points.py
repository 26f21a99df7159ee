#!/usr/bin/env python3
"""Runs Istio's own graph plotter on a CSV and says which points it plotted.

    istio-plotter-points.py PLOTTER CSV OUT_DIR --modes no_istio,both --qps 100,200 --conns 2

PLOTTER is istio/tools' perf/benchmark/graph_plotter/graph_plotter.py, as
scripts/install-istio-plotter.sh fetches it (istio.io/tools at a pinned version, from the Go
module proxy; nothing of it is kept in this repository). Each graph is drawn by the plotter's
own main(), exactly as its README runs it from the command line: every graph type against QPS
(one per connection count, `--query_str NumThreads==C`) and the latency and CPU graphs against
connections (one per rate, `--query_str ActualQPS==Q`). The PNGs go to OUT_DIR. Nothing of
the plotter is re-implemented: the series it hands to matplotlib are recorded on their way
(pyplot.plot is wrapped, then called as usual) and printed on stdout, one JSON object a line:
{"graph", "x_axis", "query_str", "mode", "x", "y"}, a y of null where the plotter found no
point. The plotter's own prints go to stderr. Exit 1 if the plotter refused its arguments.
"""

import argparse
import contextlib
import importlib.util
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")  # headless: savefig works, show() does nothing
import matplotlib.pyplot as pyplot  # noqa: E402

GRAPHS = ["latency-p50", "latency-p90", "latency-p99", "latency-p999",
          "cpu-client", "cpu-server", "mem-client", "mem-server"]
# Against connections, a few suffice: the row filter is the same for every graph type.
CONN_GRAPHS = ["latency-p99", "cpu-server"]


def load_plotter(path):
    spec = importlib.util.spec_from_file_location("graph_plotter", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def number_or_none(v):
    if v is None:
        return None
    v = float(v)
    return None if math.isnan(v) else v


def main():
    p = argparse.ArgumentParser()
    p.add_argument("plotter")
    p.add_argument("csv")
    p.add_argument("out_dir")
    p.add_argument("--modes", required=True)
    p.add_argument("--qps", required=True)
    p.add_argument("--conns", required=True)
    a = p.parse_args()
    plotter = load_plotter(a.plotter)
    os.makedirs(a.out_dir, exist_ok=True)

    drawn = []
    real_plot = pyplot.plot

    def recording_plot(x, y, *args, **kwargs):
        drawn.append((list(x), list(y), kwargs.get("label")))
        return real_plot(x, y, *args, **kwargs)

    pyplot.plot = recording_plot
    runs = [(g, "qps", "NumThreads==" + c, a.qps) for c in a.conns.split(",") for g in GRAPHS]
    runs += [(g, "conn", "ActualQPS==" + q, a.conns) for q in a.qps.split(",") for g in CONN_GRAPHS]
    for graph, x_axis, query_str, query_list in runs:
        title = os.path.join(a.out_dir, "%s_%s_%s.png" % (graph, x_axis, query_str.replace("==", "_")))
        argv = ["--graph_type=" + graph, "--x_axis=" + x_axis, "--telemetry_modes=" + a.modes,
                "--query_list=" + query_list, "--query_str=" + query_str,
                "--csv_filepath=" + a.csv, "--graph_title=" + title]
        del drawn[:]
        try:
            with contextlib.redirect_stdout(sys.stderr):
                plotter.main(argv)
        except SystemExit as e:
            print("the plotter refused %s: exit %s" % (" ".join(argv), e.code), file=sys.stderr)
            return 1
        finally:
            pyplot.close("all")
        for x, y, label in drawn:
            print(json.dumps({"graph": graph, "x_axis": x_axis, "query_str": query_str,
                              "mode": label, "x": x, "y": [number_or_none(v) for v in y]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
