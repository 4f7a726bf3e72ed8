#!/usr/bin/env python3
"""Writes docs/results.md and its plots from the data in docs/results/data/.

    python3 contrib/bench/results.py            # regenerate docs/results.md and docs/results/*.svg
    python3 contrib/bench/results.py --check    # exit 1, naming the files, if they differ

Data (UTF-8 CSV, one file per area, first line the header):

    area,case,ours,ucx,ratio,spread,unit,machine,date,commit,command,baseline,note

`ours` is Rucx's figure and `ucx` the comparison's (its name in `baseline`: "UCX 1.22", or
another program or Rucx's own baseline); `ratio` is ours / the comparison as the run
reported it; `spread` how much it moved (rounds, runs, leases). Any field but area, case,
machine, date and commit may be empty, and figures may be ranges ("0.97–1.05"): the file
says what was measured, nothing computed here. Rows are appended by contrib/bench/record.sh
as benchmarks run; the table shows, for each (case, machine), the last row of the file, in
the place of the first. plot-NAME.csv files (series,x,y,unit,machine,date,commit,command)
hold the curves drawn as docs/results/NAME.svg.

Python 3 standard library only.
"""
import csv
import io
import math
import os
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DATA = os.path.join(ROOT, "docs", "results", "data")
OUT_MD = os.path.join(ROOT, "docs", "results.md")
OUT_DIR = os.path.join(ROOT, "docs", "results")
FIELDS = ["area", "case", "ours", "ucx", "ratio", "spread", "unit", "machine", "date", "commit",
          "command", "baseline", "note"]

MACHINES = [
    ("AMD VM", "the project's 2-core AMD EPYC virtual machine (KVM, 1 MiB L2 per core, 32 MiB "
               "L3, no hardware performance counters); Debian 12 with its UCX 1.13.1 and "
               "OpenMPI 4.1.4, UCX 1.22 from the `libucx-cu13` wheel"),
    ("Xeon VM", "the 2-core Intel Xeon virtual machine (Sapphire Rapids class, KVM, 2 MB L2 per "
                "core) the project ran on on 2026-11-23"),
    ("Xeon 16c", "16 cores of the Intel Xeon host of a one-GPU machine; Ubuntu's OpenMPI 4.1.6 "
                 "over its UCX 1.16"),
    ("Xeon 32c", "32 cores of the Intel Xeon host of a two-GPU machine; the same software"),
    ("2×H200", "two NVIDIA H200 of one host, NVLink between them, CUDA 13 driver; UCX 1.22 is "
               "the wheel's CUDA build"),
    ("H100", "one NVIDIA H100 80GB HBM3, CUDA 13 driver"),
]

AREAS = [
    ("host-p2p", "CPU point-to-point: UCT and UCP",
     "`rucx-perftest` and `ucx_perftest` with the same command line between two processes, "
     "server on CPU 0 and client on CPU 1, the programs' runs interleaved. Latency is one-way "
     "at the 50th percentile; bandwidth is overall. `shm` is `UCX_TLS=posix,cma` for both, "
     "`tcp` is loopback. The in-process rows run two workers in one thread, step for step the "
     "same loop for both libraries: what is left is the software's own cost.",
     ["host-tag-lat"]),
    ("rma-am", "RMA and active messages",
     "The same programs and placement as above.", []),
    ("mpi", "MPI patterns through OpenMPI and MPICH",
     "`contrib/bench/osu.c` (the OSU micro-benchmarks' shapes: ping-pong `lat`, "
     "`MPI_Sendrecv`, windows of 64 `MPI_Isend` one way (`bw`) and both ways (`bibw`), "
     "multi-pair latency with N pairs (`mlatN`), `MPI_Put`/`MPI_Get` latency and bandwidth) run "
     "by an unmodified OpenMPI with `--mca pml ucx --mca osc ucx` (or MPICH's ch4:ucx, rows "
     "named MPICH), over the system's UCX and "
     "over Rucx's `libucp.so.0`, in alternating rounds. `lat1c` is a ping-pong with both ranks "
     "on one core. Ratios are of medians. With `OSU_AA=1` UCX also runs against itself in every "
     "round, and each figure is judged: met, spread (inside UCX's own spread) or miss "
     "([docs/benchmarks.md](benchmarks.md)).", []),
    ("regress", "Rucx against its own earlier build",
     "`contrib/bench/regress.sh BASE`: the cases that carry the targets, run with this "
     "tree's build and with BASE's in alternating rounds. The columns are the new build and "
     "the old one (not UCX), the ratio new/old, each build's spread; `same` where the rounds "
     "overlap or differ by less than the spread.", []),
    ("c-abi", "Unmodified UCX programs over Rucx's libucp.so.0",
     "The same binaries (Debian's `ucx_perftest`, an OpenMPI ping-pong) run once over UCX's "
     "`libucp` and once over Rucx's; only `LD_LIBRARY_PATH` differs.", []),
    ("datatypes", "Datatypes and iov lists",
     "`-D iov,iov` with gaps between the entries, and named application layouts against the "
     "same layout as an MPI derived datatype under OpenMPI and UCX.", []),
    ("gpu", "GPU memory",
     "`rucx-perftest` and UCX 1.22's CUDA `ucx_perftest` between two processes of one host, "
     "each process given its GPU with `CUDA_VISIBLE_DEVICES`, alternating rounds, medians. "
     "GB/s are 10^9 bytes per second.",
     ["gpu-bw"]),
    ("gpu-datatypes", "Noncontiguous data on the GPU",
     "iov lists in device memory beside UCX 1.22, and layouts in device memory against a "
     "contiguous device message of the same bytes.", []),
    ("queues", "Stream-triggered queues",
     "UCX has no stream-triggered operations: the queues are measured against Rucx's own "
     "host-synchronized path in the same run (Faces: stream synchronize, then send and "
     "receive), every variant checked against a CPU reference first.", []),
    ("charm", "Charm++",
     "Charm++ built from source against Rucx's headers and library, and against UCX, the same "
     "programs over each; the order of the libraries is reversed every other round.", []),
    ("scale", "Endpoint scale",
     "`contrib/bench/scale.c` over each library: a parent connects 1, 16, 64 and 256 endpoints "
     "to one child worker, then measures the 8-byte ping-pong over its first endpoint and the "
     "resident memory each added endpoint cost.", []),
    ("umr", "rc_verbs and UMR on the software HCA model",
     "The software HCA model is a model of an HCA, not one: these figures measure the "
     "protocol's logic over the model's data path (cross-memory copies), not a fabric. No "
     "machine here has an HCA.", []),
]

PLOTS = {
    "host-tag-lat": {
        "kind": "lines",
        "title": "UCP tag_lat, one-way latency by message size",
        "xlabel": "message size",
        "ylabel": "µs (log)",
        "caption": "Latency over message size, Rucx against UCX, on the AMD VM: shared memory "
                   "in one run of 2026-11-23 (the 8-byte figure has improved since: see the "
                   "table), tcp over loopback on 2026-11-27.",
    },
    "gpu-bw": {
        "kind": "bars",
        "title": "GPU bandwidth, 64 MiB messages, 2 × H200",
        "xlabel": "GB/s (log)",
        "caption": "GPU bandwidth at 64 MiB on two H200s, one run of 2026-11-27 "
                   "(`bash contrib/bench/gpu-tag.sh -r 3`).",
    },
}

TIME_UNITS = {"ns", "µs", "us", "ms", "s", "B"}
RATE_UNITS = {"MB/s", "GB/s"}


def read_rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for i, r in enumerate(rows):
        missing = [k for k in ("area", "case", "machine", "date", "commit") if not (r.get(k) or "").strip()]
        if missing:
            sys.exit(f"{path}:{i + 2}: empty {', '.join(missing)}")
        for k in FIELDS:
            r[k] = (r.get(k) or "").strip()
    return rows


def current(rows):
    """The last row of each (case, machine), in the place of its first."""
    order, last = [], {}
    for r in rows:
        key = (r["case"], r["machine"])
        if key not in last:
            order.append(key)
        last[key] = r
    return [last[k] for k in order]


def cell(text):
    return text.replace("|", "\\|").replace("\n", " ")


def figure(value, unit):
    if not value:
        return ""
    return f"{value} {unit}" if unit else value


def area_section(area_id, title, intro, plots, rows):
    out = [f"## {title}", "", intro, ""]
    for p in plots:
        if os.path.exists(os.path.join(DATA, f"plot-{p}.csv")):
            out += [f"![{PLOTS[p]['title']}](results/{p}.svg)", "", PLOTS[p]["caption"], ""]
    runs, run_of = [], {}
    for r in rows:
        key = (r["command"], r["commit"], r["machine"], r["date"])
        if key not in run_of:
            run_of[key] = len(runs) + 1
            runs.append((key, []))
        runs[run_of[key] - 1][1].append(r)
    out += ["| case | Rucx | UCX (or other) | ratio | spread | machine | date | run | note |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        other = figure(r["ucx"], r["unit"])
        if r["baseline"]:
            other = f"{other}, {r['baseline']}" if other else r["baseline"]
        n = run_of[(r["command"], r["commit"], r["machine"], r["date"])]
        out.append("| " + " | ".join(cell(x) for x in [
            r["case"], figure(r["ours"], r["unit"]), other, r["ratio"], r["spread"],
            r["machine"], r["date"], str(n), r["note"]]) + " |")
    out += ["", "Runs:", ""]
    for (command, commit, machine, date), _ in runs:
        shown = command if command.startswith("by hand") else f"`{command}`"
        out.append(f"{run_of[(command, commit, machine, date)]}. {shown} at `{commit}` "
                   f"({machine}, {date})")
    out.append("")
    return out


def markdown(tables):
    out = [
        "# Results",
        "",
        "<!-- Generated by `python3 contrib/bench/results.py` from docs/results/data/*.csv."
        " Edit the data, not this file. -->",
        "",
        "Each row is the latest measurement of a case: Rucx's figure, the figure it is compared "
        "with (UCX run beside it in the same script, or what the row names), their ratio "
        "Rucx / other as the run reported it, and how much it moved between rounds. For times "
        "and memory a ratio below 1 is better for Rucx; for bandwidth, above 1. Each row names "
        "its machine and date, and the command and commit it came from (the run's number). How "
        "each script runs and what its verdicts mean: [docs/benchmarks.md](benchmarks.md); why "
        "the figures are what they are: the design notes next to the code "
        "([uct.md](uct.md), [ucp.md](ucp.md), [c-abi.md](c-abi.md), [gpu.md](gpu.md), "
        "[queues.md](queues.md)).",
        "",
        "To add a result, run a benchmark script with `RUCX_RECORD=1` (it appends rows through "
        "`contrib/bench/record.sh`), or add a row to the area's CSV by hand, then run "
        "`python3 contrib/bench/results.py`. The test suite fails when this file and the data "
        "disagree.",
        "",
        "Machines:",
        "",
    ]
    for name, desc in MACHINES:
        out.append(f"- **{name}**: {desc}.")
    out += ["", "Areas: " + ", ".join(f"[{t}](#{anchor(t)})" for (_, t, _, _, _) in tables) + ".", ""]
    for area_id, title, intro, plots, rows in tables:
        out += area_section(area_id, title, intro, plots, rows)
    return "\n".join(out).rstrip("\n") + "\n"


def anchor(title):
    a = "".join(ch for ch in title.lower() if ch.isalnum() or ch in " -_").strip()
    return a.replace(" ", "-")


# ----------------------------------------------------------------------------------- SVG

COLORS = ["#1f6fb4", "#d9541e", "#2a9d4a", "#8e44ad", "#7f7f7f"]


def esc(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def fmt(v):
    return f"{v:.1f}"


def size_label(b):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale:
            return f"{b // scale} {unit}"
    return f"{b} B"


def num_label(v):
    return f"{v:g}"


def svg_lines(spec, rows):
    w, h, left, right, top, bottom = 680, 420, 70, 200, 40, 50
    series = []
    for r in rows:
        if r["series"] not in series:
            series.append(r["series"])
    pts = [(float(r["x"]), float(r["y"])) for r in rows]
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    x0, x1 = math.floor(math.log2(min(xs))), math.ceil(math.log2(max(xs)))
    y0, y1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    pw, ph = w - left - right, h - top - bottom

    def px(x):
        return left + (math.log2(x) - x0) / (x1 - x0) * pw

    def py(y):
        return top + ph - (math.log10(y) - y0) / (y1 - y0) * ph

    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
         'font-family="sans-serif" font-size="12">',
         f'<rect width="{w}" height="{h}" fill="white"/>',
         f'<text x="{left}" y="22" font-size="14" font-weight="bold">{esc(spec["title"])}</text>']
    for e in range(y0, y1 + 1):
        y = py(10 ** e)
        o.append(f'<line x1="{left}" y1="{fmt(y)}" x2="{left + pw}" y2="{fmt(y)}" stroke="#ddd"/>')
        o.append(f'<text x="{left - 6}" y="{fmt(y + 4)}" text-anchor="end">{num_label(10 ** e)}</text>')
    for e in range(x0, x1 + 1, 3):
        x = px(2 ** e)
        o.append(f'<line x1="{fmt(x)}" y1="{top}" x2="{fmt(x)}" y2="{top + ph}" stroke="#ddd"/>')
        o.append(f'<text x="{fmt(x)}" y="{top + ph + 16}" text-anchor="middle">{size_label(2 ** e)}</text>')
    o.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
    o.append(f'<text x="{left + pw / 2:.1f}" y="{h - 12}" text-anchor="middle">{esc(spec["xlabel"])}</text>')
    o.append(f'<text x="16" y="{top + ph / 2:.1f}" text-anchor="middle" '
             f'transform="rotate(-90 16 {top + ph / 2:.1f})">{esc(spec["ylabel"])}</text>')
    for i, s in enumerate(series):
        color = COLORS[i % len(COLORS)]
        dash = "" if s.startswith("Rucx") else ' stroke-dasharray="6 4"'
        sp = sorted((float(r["x"]), float(r["y"])) for r in rows if r["series"] == s)
        path = " ".join(f"{fmt(px(x))},{fmt(py(y))}" for x, y in sp)
        o.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        for x, y in sp:
            o.append(f'<circle cx="{fmt(px(x))}" cy="{fmt(py(y))}" r="3" fill="{color}"/>')
        ly = top + 10 + i * 20
        o.append(f'<line x1="{left + pw + 12}" y1="{ly}" x2="{left + pw + 36}" y2="{ly}" '
                 f'stroke="{color}" stroke-width="2"{dash}/>')
        o.append(f'<text x="{left + pw + 42}" y="{ly + 4}">{esc(s)}</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


def svg_bars(spec, rows):
    cats, series = [], []
    for r in rows:
        if r["x"] not in cats:
            cats.append(r["x"])
        if r["series"] not in series:
            series.append(r["series"])
    val = {(r["series"], r["x"]): float(r["y"]) for r in rows}
    label = {(r["series"], r["x"]): r["y"] for r in rows}
    bar, gap = 14, 14
    left, right, top, bottom = 190, 40, 40, 50
    ph = len(cats) * (len(series) * bar + gap)
    w, h = 640, top + ph + bottom
    pw = w - left - right
    vs = list(val.values())
    x0, x1 = math.floor(math.log10(min(vs))), math.ceil(math.log10(max(vs)))

    def px(v):
        return left + (math.log10(v) - x0) / (x1 - x0) * pw

    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
         'font-family="sans-serif" font-size="12">',
         f'<rect width="{w}" height="{h}" fill="white"/>',
         f'<text x="{left}" y="22" font-size="14" font-weight="bold">{esc(spec["title"])}</text>']
    for e in range(x0, x1 + 1):
        x = px(10 ** e)
        o.append(f'<line x1="{fmt(x)}" y1="{top}" x2="{fmt(x)}" y2="{top + ph}" stroke="#ddd"/>')
        o.append(f'<text x="{fmt(x)}" y="{top + ph + 16}" text-anchor="middle">{num_label(10 ** e)}</text>')
    for ci, c in enumerate(cats):
        gy = top + ci * (len(series) * bar + gap) + gap / 2
        o.append(f'<text x="{left - 8}" y="{fmt(gy + len(series) * bar / 2 + 4)}" text-anchor="end">{esc(c)}</text>')
        for si, s in enumerate(series):
            if (s, c) not in val:
                continue
            v = val[(s, c)]
            y = gy + si * bar
            o.append(f'<rect x="{left}" y="{fmt(y)}" width="{fmt(px(v) - left)}" height="{bar - 2}" '
                     f'fill="{COLORS[si % len(COLORS)]}"/>')
            o.append(f'<text x="{fmt(px(v) + 4)}" y="{fmt(y + bar - 4)}" font-size="10">{esc(label[(s, c)])}</text>')
    o.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
    o.append(f'<text x="{left + pw / 2:.1f}" y="{h - 12}" text-anchor="middle">{esc(spec["xlabel"])}</text>')
    for si, s in enumerate(series):
        lx = left + si * 110
        o.append(f'<rect x="{lx}" y="28" width="12" height="10" fill="{COLORS[si % len(COLORS)]}"/>')
        o.append(f'<text x="{lx + 16}" y="37" font-size="11">{esc(s)}</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


def generate():
    """Returns {path: text} of every file this script writes."""
    by_area = {}
    for name in sorted(os.listdir(DATA)):
        if not name.endswith(".csv") or name.startswith("plot-"):
            continue
        for r in read_rows(os.path.join(DATA, name)):
            by_area.setdefault(r["area"], []).append(r)
    known = {a[0] for a in AREAS}
    unknown = sorted(set(by_area) - known)
    if unknown:
        sys.exit(f"results.py: rows of unknown areas {unknown}: add them to AREAS")
    tables = [(a, t, i, p, current(by_area[a])) for (a, t, i, p) in AREAS if a in by_area]
    files = {OUT_MD: markdown(tables)}
    for p, spec in PLOTS.items():
        path = os.path.join(DATA, f"plot-{p}.csv")
        if not os.path.exists(path):
            continue
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        draw = svg_lines if spec["kind"] == "lines" else svg_bars
        files[os.path.join(OUT_DIR, f"{p}.svg")] = draw(spec, rows)
    return files


def main(argv):
    check = "--check" in argv[1:]
    stale = []
    for path, text in generate().items():
        old = None
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                old = f.read()
        if old == text:
            continue
        if check:
            stale.append(os.path.relpath(path, ROOT))
        else:
            with io.open(path, "w", encoding="utf-8", newline="\n") as f:
                f.write(text)
            print(f"wrote {os.path.relpath(path, ROOT)}")
    if stale:
        print("results.py --check: out of date with docs/results/data (run python3 "
              "contrib/bench/results.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
