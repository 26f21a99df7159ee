"""Medians and ratios of a bench TSV (phase, tool, rep, requests, gen_cpu_s, req_per_cpu_s,
rss_kib, rps, extra), as bench/run.sh and bench/protocols.sh write it.

usage: summarize.py FILE UNIT   (UNIT names what req_per_cpu_s counts, for the header)"""
import csv
import statistics
import sys

path, unit = sys.argv[1], sys.argv[2]
rows = list(csv.DictReader(open(path), delimiter="\t"))
med = {}
for r in rows:
    med.setdefault((r["phase"], r["tool"]), []).append(r)
if not med:
    sys.exit("no rows in " + path)
print("\nmedian of %d interleaved repetitions (%s per generator CPU-second)" % (max(len(v) for v in med.values()), unit))
print("%-8s %-17s %12s %10s %10s %12s  %s" % ("phase", "tool", "per CPU-s", "CPU-s", "RSS MiB", "per s", "meshbench notes"))
for (phase, tool), rs in med.items():
    m = lambda k: statistics.median(float(x[k]) for x in rs)
    print("%-8s %-17s %12.0f %10.2f %10.1f %12.0f  %s" % (phase, tool, m("req_per_cpu_s"), m("gen_cpu_s"), m("rss_kib") / 1024, m("rps"), "; ".join(x["extra"] for x in rs)))
print("\nratios (meshbench / peer, medians)")
for phase in dict.fromkeys(p for p, _ in med):
    mb = med.get((phase, "meshbench"))
    if not mb:
        continue
    v = statistics.median(float(x["req_per_cpu_s"]) for x in mb)
    for (p, tool), rs in med.items():
        if p == phase and tool != "meshbench":
            print("  %-8s meshbench/%-17s %.2fx" % (phase, tool, v / statistics.median(float(x["req_per_cpu_s"]) for x in rs)))
