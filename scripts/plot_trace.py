"""Draws the timeline of a Chrome trace exported by torch.profiler as an SVG.

    python scripts/plot_trace.py TRACE.json [OUT.svg] [--title TEXT]

One row per CPU thread (its operators, nested ops stacked below their parent)
and one row per device stream (kernels and copies), on a shared time axis in
milliseconds; grey lines join each launch call to the device work it queued
(the trace's flow events). Hovering a bar shows its name and duration. Written
directly as SVG (no plotting library needed); used for
docs/_static/profiler_timeline.svg.
"""

import argparse
import json
import sys
import zlib
from xml.sax.saxutils import escape

DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac"]
WIDTH, LABEL_W, BAR_H, GAP, TOP, MAX_DEPTH = 1100, 170, 14, 10, 40, 6


def load_events(path: str) -> list:
    try:
        with open(path) as f:
            trace = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SystemExit(f"plot_trace: {path} is not a Chrome trace JSON file ({e})")
    events = trace.get("traceEvents") if isinstance(trace, dict) else trace
    if not isinstance(events, list):
        raise SystemExit(f"plot_trace: {path} is not a Chrome trace (no traceEvents list)")
    return events


def build_rows(events: list) -> list:
    """[((pid, tid), label, [(start, duration, name, depth)], depth count)],
    CPU threads first, then device streams ordered by device and stream."""
    process = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    thread = {(e["pid"], e["tid"]): e["args"]["name"]
              for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    tracks = {}
    for e in events:
        if e.get("ph") != "X" or "dur" not in e or e.get("cat") == "Trace":
            continue  # "Trace": Kineto's span markers, not a thread's work
        device = e.get("cat") in DEVICE_CATEGORIES
        tracks.setdefault((not device, e["pid"], e["tid"]), []).append(e)
    rows = []
    for (cpu, pid, tid), track in sorted(tracks.items(), key=lambda kv: (not kv[0][0], str(kv[0][1]), str(kv[0][2]))):
        if cpu:
            label = f"CPU thread {tid}"
        else:
            label = f"{process.get(pid, f'device {pid}')} {thread.get((pid, tid), f'stream {tid}')}"
        bars, open_ends = [], []
        for e in sorted(track, key=lambda e: (e["ts"], -e["dur"])):
            while open_ends and open_ends[-1] <= e["ts"]:
                open_ends.pop()
            depth = len(open_ends) if cpu else 0
            open_ends.append(e["ts"] + e["dur"])
            if depth < MAX_DEPTH:
                bars.append((e["ts"], e["dur"], e["name"], depth))
        rows.append(((pid, tid), label, bars, 1 + max(b[3] for b in bars)))
    return rows


def color(name: str) -> str:
    return PALETTE[zlib.crc32(name.encode()) % len(PALETTE)]


def render(events: list, title: str) -> str:
    rows = build_rows(events)
    if not rows:
        raise SystemExit("plot_trace: the trace has no complete ('X') events to draw")
    t0 = min(b[0] for _, _, bars, _ in rows for b in bars)
    t1 = max(b[0] + b[1] for _, _, bars, _ in rows for b in bars)
    scale = (WIDTH - LABEL_W - 20) / max(t1 - t0, 1e-3)

    def x(ts):
        return LABEL_W + (ts - t0) * scale

    # bar_y: (track, start) -> y of the deepest bar starting there (a flow
    # starts at the innermost call: the launch).
    out, y, bar_y = [], TOP, {}
    for track, label, bars, depth in rows:
        height = depth * BAR_H
        out.append(f'<rect x="0" y="{y - 2}" width="{WIDTH}" height="{height + 4}" fill="#f4f4f4"/>')
        out.append(f'<text x="6" y="{y + BAR_H - 3}" font-size="11">{escape(label)}</text>')
        for ts, dur, name, level in bars:
            w = max(dur * scale, 0.5)
            by = y + level * BAR_H
            bar_y[track, ts] = max(by, bar_y.get((track, ts), by))
            out.append(f'<rect x="{x(ts):.2f}" y="{by}" width="{w:.2f}" height="{BAR_H - 2}" '
                       f'fill="{color(name)}"><title>{escape(name)} ({dur:.1f} µs)</title></rect>')
            if w > 7 * len(name):
                out.append(f'<text x="{x(ts) + 2:.2f}" y="{by + BAR_H - 4}" font-size="9" fill="white">'
                           f'{escape(name)}</text>')
        y += height + GAP
    # Flow arrows: launch call (start, "s") to device work (finish, "f").
    flows = {}
    for e in events:
        if e.get("ph") in ("s", "f") and e.get("cat") == "ac2g":
            flows.setdefault(e["id"], {})[e["ph"]] = e
    for ends in flows.values():
        ys, yf = (bar_y.get(((ends[k]["pid"], ends[k]["tid"]), ends[k]["ts"])) if k in ends else None
                  for k in ("s", "f"))
        if ys is not None and yf is not None:
            out.append(f'<line x1="{x(ends["s"]["ts"]):.2f}" y1="{ys + BAR_H / 2}" x2="{x(ends["f"]["ts"]):.2f}" '
                       f'y2="{yf + BAR_H / 2}" stroke="#888" stroke-width="0.6"/>')
    # Time axis in milliseconds.
    span_ms = (t1 - t0) / 1000
    step = next(s for s in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
                if span_ms / s <= 10)
    grid, tick = [], 0.0
    while tick <= span_ms + 1e-9:
        tx = x(t0 + tick * 1000)
        grid.append(f'<line x1="{tx:.2f}" y1="{TOP - 8}" x2="{tx:.2f}" y2="{y}" stroke="#ddd" stroke-width="0.5"/>')
        grid.append(f'<text x="{tx:.2f}" y="{TOP - 12}" font-size="9" text-anchor="middle">{tick:g} ms</text>')
        tick += step
    header = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{y + 10}" '
              f'font-family="sans-serif">\n<title>{escape(title)}</title>\n'
              f'<rect width="100%" height="100%" fill="white"/>\n'
              f'<text x="6" y="14" font-size="12" font-weight="bold">{escape(title)}</text>')
    # The grid first, so that bars are drawn over it.
    return "\n".join([header, *grid, *out, "</svg>\n"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace")
    parser.add_argument("out", nargs="?", help="SVG file (default: the trace's name with .svg)")
    parser.add_argument("--title", default="torch.profiler timeline")
    args = parser.parse_args()
    svg = render(load_events(args.trace), args.title)
    out = args.out or args.trace.rsplit(".json", 1)[0] + ".svg"
    with open(out, "w") as f:
        f.write(svg)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
