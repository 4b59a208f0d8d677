#!/usr/bin/env python3
"""docs/research/results.md, "Mixed precision under a bit budget": the Pareto plot (bits per weight
against the measured KL to the FP model, log scale) and the markdown table from the results.csv
files measure.sh writes. Plain SVG, no plotting library.
    python3 docs/research/mixed-precision/pareto.py OUT.svg RESULTS.csv [RESULTS.csv ...] > table.md
"""
import csv
import math
import sys

W, H, L, R, T, B = 760, 420, 70, 190, 30, 50  # size and margins


def load(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            rows += list(csv.DictReader(f))
    for r in rows:
        for k in ("bits", "predicted_kl", "kl", "kl_stderr", "delta_ppl", "delta_ppl_stderr"):
            r[k] = float(r[k])
    return rows


def table(rows):
    print("| model | method | scheme | bits | predicted KL | KL | Δppl |")
    print("|---|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['method']} | {r['scheme']} | {r['bits']:.3f} | {r['predicted_kl']:.4f} | "
              f"{r['kl']:.4f} ± {r['kl_stderr']:.4f} | {r['delta_ppl']:+.2f} ± {r['delta_ppl_stderr']:.2f} |")


def marker(shape, x, y, colour):
    """An SVG marker: a filled circle (plans), or an open square, triangle or diamond (recipes)."""
    if shape == "circle":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{colour}"/>'
    stroke = f'fill="none" stroke="{colour}" stroke-width="1.5"'
    if shape == "square":
        return f'<rect x="{x - 4:.1f}" y="{y - 4:.1f}" width="8" height="8" {stroke}/>'
    if shape == "triangle":
        return f'<polygon points="{x:.1f},{y - 5:.1f} {x - 5:.1f},{y + 4:.1f} {x + 5:.1f},{y + 4:.1f}" {stroke}/>'
    return f'<polygon points="{x:.1f},{y - 5:.1f} {x + 5:.1f},{y:.1f} {x:.1f},{y + 5:.1f} {x - 5:.1f},{y:.1f}" {stroke}/>'


def svg(rows, path):
    bits = [r["bits"] for r in rows]
    kls = [r["kl"] for r in rows if r["kl"] > 0]
    x0, x1 = min(bits) - 0.2, max(bits) + 0.2
    y0, y1 = math.log10(min(kls)) - 0.1, math.log10(max(kls)) + 0.1
    px = lambda b: L + (b - x0) / (x1 - x0) * (W - L - R)
    py = lambda k: T + (y1 - math.log10(k)) / (y1 - y0) * (H - T - B)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>']
    b = math.ceil(x0 * 2) / 2
    while b <= x1:
        out.append(f'<line x1="{px(b):.1f}" y1="{H - B}" x2="{px(b):.1f}" y2="{H - B + 5}" stroke="black"/>')
        out.append(f'<text x="{px(b):.1f}" y="{H - B + 18}" text-anchor="middle">{b:g}</text>')
        b += 0.5
    for e in range(math.floor(y0), math.ceil(y1) + 1):
        for m in (1, 2, 5):
            k = m * 10 ** e
            if y0 <= math.log10(k) <= y1:
                out.append(f'<line x1="{L - 5}" y1="{py(k):.1f}" x2="{L}" y2="{py(k):.1f}" stroke="black"/>')
                out.append(f'<text x="{L - 8}" y="{py(k) + 4:.1f}" text-anchor="end">{k:g}</text>')
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 10}" text-anchor="middle">bits per weight (block linears, scales counted)</text>')
    out.append(f'<text transform="translate(16,{(T + H - B) / 2}) rotate(-90)" text-anchor="middle">KL to FP (nats per token, WikiText-2 test)</text>')
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    shapes = {"uniform-mxfp4": "square", "attention-mxfp8": "triangle", "first-last-mxfp8": "diamond", "uniform-mxfp8": "square"}
    series = sorted({(r["model"], r["method"]) for r in rows})
    legend_y = T
    for i, (model, method) in enumerate(series):
        c = colours[i % len(colours)]
        mine = [r for r in rows if r["model"] == model and r["method"] == method]
        plan = sorted((r for r in mine if r["scheme"].startswith("plan-")), key=lambda r: r["bits"])
        pts = " ".join(f"{px(r['bits']):.1f},{py(r['kl']):.1f}" for r in plan)
        if len(plan) >= 2:
            out.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="1.5"/>')
        for r in plan:
            out.append(marker("circle", px(r["bits"]), py(r["kl"]), c))
        for r in mine:
            if r["scheme"] in shapes:
                out.append(marker(shapes[r["scheme"]], px(r["bits"]), py(r["kl"]), c))
        out.append(f'<line x1="{W - R + 15}" y1="{legend_y + 6}" x2="{W - R + 35}" y2="{legend_y + 6}" stroke="{c}" stroke-width="2"/>')
        out.append(f'<text x="{W - R + 40}" y="{legend_y + 10}">{model} {method}</text>')
        legend_y += 18
    legend_y += 8
    for label, shape in (("plan (latmix plan)", "circle"), ("uniform MXFP4 / MXFP8", "square"),
                         ("attention MXFP8", "triangle"), ("first+last MXFP8", "diamond")):
        x, y = W - R + 25, legend_y + 5
        out.append(marker(shape, x, y, "gray"))
        out.append(f'<text x="{x + 15}" y="{y + 4}">{label}</text>')
        legend_y += 18
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    rows = load(sys.argv[2:])
    table(rows)
    svg(rows, sys.argv[1])
