#!/usr/bin/env python3
"""Draw a run's loss curve across its restarts as an SVG.

usage: plot_loss.py RUN_DIR/metrics.jsonl OUT.svg [REFERENCE/metrics.jsonl]

Each logged step is a point; each stop is a red dashed line; each segment
between restarts is labelled with its world size.  With a reference run
(the same training uninterrupted), its curve is drawn under the first as a
wide grey line.  Standard library only.
"""
import json
import sys


def read(path):
    steps, stops, segments = [], [], []
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue  # a torn last line after a crash
            if "event" in r:
                if r["event"] == "stop":
                    stops.append(r["step"])
                elif r["event"] == "start":
                    segments.append((r["step"], r["world_size"]))
            elif "loss" in r:
                steps.append((r["step"], r["loss"]))
    return steps, stops, segments


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    steps, stops, segments = read(sys.argv[1])
    ref = read(sys.argv[3])[0] if len(sys.argv) == 4 else []
    if not steps:
        print("plot_loss: no steps in %s" % sys.argv[1], file=sys.stderr)
        return 1
    W, H, L, R, T, B = 900, 420, 70, 20, 40, 50
    xmax = max(s for s, _ in steps)
    ymax = max(l for _, l in steps) * 1.05
    ymin = 0.0

    def X(s):
        return L + (W - L - R) * s / max(xmax, 1)

    def Y(v):
        return T + (H - T - B) * (1 - (v - ymin) / max(ymax - ymin, 1e-12))

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (W, H),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="20" font-size="15">training loss across stops and '
           'restarts</text>' % L]
    out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>'
               % (L, H - B, W - R, H - B))
    out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>'
               % (L, T, L, H - B))
    for i in range(6):
        v = ymin + (ymax - ymin) * i / 5
        out.append('<text x="%d" y="%.1f" text-anchor="end">%.3f</text>'
                   % (L - 6, Y(v) + 4, v))
        s = xmax * i / 5
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>'
                   % (X(s), H - B + 18, s))
    out.append('<text x="%d" y="%d" text-anchor="middle">step</text>'
               % ((L + W - R) / 2, H - 12))
    if ref:
        rpts = " ".join("%.1f,%.1f" % (X(s), Y(l)) for s, l in sorted(ref))
        out.append('<polyline fill="none" stroke="#bbbbbb" stroke-width="6" '
                   'points="%s"/>' % rpts)
        out.append('<text x="%d" y="%d" fill="#888">grey: the same run '
                   'uninterrupted</text>' % (W - R - 250, H - B - 10))
    pts = " ".join("%.1f,%.1f" % (X(s), Y(l)) for s, l in sorted(steps))
    out.append('<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" '
               'points="%s"/>' % pts)
    for s in stops:
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="red" '
                   'stroke-dasharray="5,4"/>' % (X(s), T, X(s), H - B))
        out.append('<text x="%.1f" y="%d" fill="red" text-anchor="middle">'
                   'stop @%d</text>' % (X(s), T - 4, s))
    for i, (s, w) in enumerate(segments):
        end = segments[i + 1][0] if i + 1 < len(segments) else xmax
        out.append('<text x="%.1f" y="%d" fill="#444" text-anchor="middle">'
                   '%d rank%s</text>' % ((X(s) + X(end)) / 2, T + 16, w,
                                         "" if w == 1 else "s"))
    out.append('</svg>')
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
