"""The GPU check's picture: where one denoising pass's time goes on each path, against the weight-read floor.

The check's profile table lists a pass's top kernels by time; read as numbers, the gap to the issue's goal (a pass
within 1.25x of the time it takes to read the weights) and what fills it take a while to see. Here each profiled
path is one bar: its kernels' time by family (matrix products, attention, the norms and other small steps, the
rest), then the graphed pass's time that no kernel accounts for (the gaps between kernels), with the shape's floor
and the goal drawn across. An SVG written by hand, like ``latency_bench.voice_bench``'s: no plotting library.
"""

from __future__ import annotations

from xml.sax.saxutils import escape

FAMILIES = {  # family: (colour, substrings of the kernel names it takes, lower case)
    "matrix products": ("#4e79a7", ("nvjet", "gemm", "cublas", "splitk", "_thin_linear", "_sum_splits", "_qkv_rope")),
    "attention": ("#f28e2b", ("_block_partials", "_block_combine", "sdpa", "flash", "fmha", "attention")),
    "norms, RoPE, SwiGLU, copies": ("#59a14f", ("norm", "silu", "rope", "rotary", "elementwise", "gather", "index")),
    "other kernels": ("#bab0ac", ()),
}
GAPS = ("gaps between kernels", "#e8e8e8")
BAR_X, BAR_W, ROW_H = 230, 420, 26


def kernel_family(name: str) -> str:
    """The family a profiled kernel's name puts it in ("other kernels" when none does)."""
    lower = name.lower()
    return next((family for family, (_, keys) in FAMILIES.items() if any(k in lower for k in keys)), "other kernels")


def pass_segments(profile: dict[str, object]) -> dict[str, float]:
    """A profile's microseconds by family: its top kernels classified, the kernels past the top as "other", and
    the graphed pass's time beyond all kernel time as the gaps."""
    us = dict.fromkeys(FAMILIES, 0.0)
    for row in profile["top"]:
        us[kernel_family(str(row["kernel"]))] += float(row["us"])
    us["other kernels"] += max(0.0, float(profile["kernel_us"]) - sum(us.values()))
    us[GAPS[0]] = max(0.0, float(profile["graphed_pass_ms"]) * 1000 - float(profile["kernel_us"]))
    return us


def pass_breakdown_svg(profiles: list[dict[str, object]], floors_ms: dict[str, float], goal_ratio: float) -> str:
    """One bar a profile, grouped by shape, each group with its weight-read floor (solid) and the goal (dashed)."""
    shapes = list(dict.fromkeys(str(p["shape"]) for p in profiles))
    longest = max([float(p["graphed_pass_ms"]) for p in profiles] + [goal_ratio * f for f in floors_ms.values()])
    scale = BAR_W / max(longest, 1e-9) / 1000  # px per microsecond
    colours = {family: colour for family, (colour, _) in FAMILIES.items()} | {GAPS[0]: GAPS[1]}
    parts, y = [], 20
    for shape in shapes:
        group = [p for p in profiles if p["shape"] == shape]
        parts.append(f'<text x="10" y="{y + 14}" font-weight="bold">{escape(shape)} at {group[0]["prompt"]} cached '
                     "tokens: one 16-token pass</text>")
        top = y + 22
        for row, profile in enumerate(group):
            bar_y, x = top + row * (ROW_H + 6), float(BAR_X)
            parts.append(f'<text x="10" y="{bar_y + 17}">{escape(str(profile["path"]))}</text>')
            for family, us in pass_segments(profile).items():
                width = us * scale
                parts.append(f'<rect x="{x:.1f}" y="{bar_y}" width="{width:.1f}" height="{ROW_H}" '
                             f'fill="{colours[family]}"><title>{escape(family)}: {us:.0f} us</title></rect>')
                x += width
            ms = float(profile["graphed_pass_ms"])
            ratio = f" ({ms / floors_ms[shape]:.2f}x floor)" if shape in floors_ms else ""
            parts.append(f'<text x="{x + 6:.1f}" y="{bar_y + 17}">{ms:.2f} ms{ratio}</text>')
        bottom = top + len(group) * (ROW_H + 6)
        if shape in floors_ms:  # each line's label below the group, one under the other
            lines = ((1.0, "", "weight-read floor"), (goal_ratio, ' stroke-dasharray="5,3"', f"goal: {goal_ratio}x floor"))
            for i, (ratio, dash, label) in enumerate(lines):
                lx = BAR_X + floors_ms[shape] * ratio * 1000 * scale
                parts.append(f'<line x1="{lx:.1f}" y1="{top - 4}" x2="{lx:.1f}" y2="{bottom + 12 * i}" '
                             f'stroke="#c00"{dash}/><text x="{lx + 3:.1f}" y="{bottom + 10 + 12 * i}" fill="#c00" '
                             f'font-size="10">{label}</text>')
        y = bottom + 36
    for i, (family, colour) in enumerate(colours.items()):
        lx = 10 + 190 * (i % 3)
        ly = y + 18 * (i // 3)
        parts.append(f'<rect x="{lx}" y="{ly}" width="12" height="12" fill="{colour}" stroke="#888"/>'
                     f'<text x="{lx + 16}" y="{ly + 11}">{escape(family)}</text>')
    height = y + 18 * ((len(colours) + 2) // 3) + 10
    return "\n".join([f'<svg xmlns="http://www.w3.org/2000/svg" width="800" height="{height}" '
                      'font-family="sans-serif" font-size="12">', *parts, "</svg>"])
