#!/usr/bin/env python3
"""bench/control_plane_table.py FILE... - the rows and the fit of bench/control-plane.sh.

Each FILE is `meshbench results export NAME --format json` of one control-plane experiment.
Prints one row per step (istiod's CPU and memory, convergence, propagation per xDS type,
pushes, bytes, the clients' own CPU, the twin's agreement), then the least-squares fit of
istiod's CPU (millicores) and memory (MiB) = a + b x proxies + c x services over the quiet
steps (no churn), when there are three or more of them and they do not all lie on one line.
"""
import json
import sys


def rows(files):
    for f in files:
        doc = json.load(open(f))
        for s in doc.get("steps", []):
            mesh = (s.get("params") or {}).get("mesh")
            if not mesh:
                continue
            istiod = next((u for u in s.get("usage", []) if u["role"] == "istiod"), None)
            yield s, mesh, istiod, s.get("control_plane")


def fit(points):
    """Least squares of y on (1, x1, x2); None when singular."""
    n = len(points)
    if n < 3:
        return None
    # Normal equations, 3x3.
    cols = [[1.0, p[0], p[1]] for p in points]
    ys = [p[2] for p in points]
    a = [[sum(c[i] * c[j] for c in cols) for j in range(3)] for i in range(3)]
    b = [sum(c[i] * y for c, y in zip(cols, ys)) for i in range(3)]
    # Gaussian elimination with partial pivoting.
    m = [row[:] + [v] for row, v in zip(a, b)]
    for i in range(3):
        piv = max(range(i, 3), key=lambda r: abs(m[r][i]))
        if abs(m[piv][i]) < 1e-9 * max(1.0, abs(m[0][0])):
            return None
        m[i], m[piv] = m[piv], m[i]
        for r in range(3):
            if r != i:
                k = m[r][i] / m[i][i]
                m[r] = [x - k * y for x, y in zip(m[r], m[i])]
    coef = [m[i][3] / m[i][i] for i in range(3)]
    pred = [coef[0] + coef[1] * p[0] + coef[2] * p[1] for p in points]
    mean = sum(ys) / n
    ss_tot = sum((y - mean) ** 2 for y in ys) or 1e-12
    r2 = 1 - sum((y - q) ** 2 for y, q in zip(ys, pred)) / ss_tot
    return coef, r2


def main(files):
    head = (f"{'proxies':>7} {'svcs':>5} {'churn':>8} {'status':>7} {'mCPU':>6} {'RSS MiB':>8} "
            f"{'peak':>6} {'conv s':>6}  {'cds p50/p99/90%':>17}  {'eds p50/p99/90%':>17}  "
            f"{'lds p50/p99/90%':>17} {'missed':>6} {'pushes':>7} {'xDS KB/s':>8} "
            f"{'cli mCPU':>8} twin")
    print(head)
    quiet = []
    for s, mesh, istiod, f in rows(files):
        churn = f"{mesh['endpoint_churn_per_s']:g}+{mesh['config_churn_per_s']:g}"
        if not f or not istiod:
            print(f"{mesh['proxies']:>7} {mesh['services']:>5} {churn:>8} {s['status']:>7}  "
                  f"{s.get('error') or 'no figures'}")
            continue
        mcpu = istiod["cpu_millicores_avg"]
        rss, peak = istiod["rss_mib_avg"], istiod["rss_mib_max"]
        props = {p["xds"]: p for p in f["propagation"]}

        def prop(t):
            p = props.get(t)
            if not p:
                return "-"
            ninety = p.get("to_90_percent_ms")
            ninety = f"{ninety:.0f}" if ninety is not None else "-"
            return f"{p['p50_ms']:.0f}/{p['p99_ms']:.0f}/{ninety}"

        missed = sum(p["expected"] - p["acked"] for p in f["propagation"])
        pushes = sum(f["pushes"].values())
        twin = "agrees" if not f["agreement"]["differences"] else (
            f"{len(f['agreement']['differences'])} differ")
        print(f"{mesh['proxies']:>7} {mesh['services']:>5} {churn:>8} {s['status']:>7} "
              f"{mcpu:>6.0f} {rss:>8.0f} {peak:>6.0f} {f['converged_secs']:>6.1f}  "
              f"{prop('cds'):>17}  {prop('eds'):>17}  {prop('lds'):>17} {missed:>6} "
              f"{pushes:>7} {f['xds_bytes_per_sec'] / 1000:>8.1f} "
              f"{f['clients_cpu_millicores']:>8.0f} {twin}")
        if mesh["endpoint_churn_per_s"] == 0 and mesh["config_churn_per_s"] == 0 \
                and s["status"] == "ok":
            quiet.append((mesh["proxies"], mesh["services"], mcpu, rss))
    for name, idx, unit in (("CPU", 2, "millicores"), ("memory", 3, "MiB")):
        got = fit([(p[0], p[1], p[idx]) for p in quiet])
        if got is None:
            print(f"fit of istiod's {name}: not enough quiet points off one line "
                  f"({len(quiet)} quiet steps)")
            continue
        (a, b, c), r2 = got
        print(f"fit of istiod's {name} ({unit}) over {len(quiet)} quiet steps: "
              f"{a:.1f} + {b:.3f} x proxies + {c:.3f} x services (R^2 {r2:.3f}); "
              f"at 2,000 proxies and 1,000 services: {a + 2000 * b + 1000 * c:.0f}")


if __name__ == "__main__":
    main(sys.argv[1:])
