"""A picture of a checked history: HTML (self-contained page) or PNG (matplotlib).

One panel per sub-history (the failing one first). In a panel, one lane per
client, one bar per operation from its invocation to its completion (an open,
in-doubt operation is hatched and runs to the end). The time axis is the
*order* of events, not their spacing, so that short operations stay visible.
The linearization the checker found is drawn as a chain of points, one on
each operation, in linearization order. For a failure, the chain is the
longest linearizable prefix; the operation that had to go next and could not
is red, the other operations tried there are orange, the ones never reached
are grey.

:func:`layout` is pure; :func:`write_html` and :func:`write_png` write files.
"""

from __future__ import annotations

import html
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sdpaxos.check.checker import CheckResult, PartitionResult, Verdict
from sdpaxos.check.history import Operation

PANELS_MAX: Final = 12
"""Sub-histories drawn at most (the failing one always comes first)."""

PNG_PANELS_MAX: Final = 3
"""Sub-histories in a PNG (a picture, not a report)."""

LABEL_CHARS_MAX: Final = 40
"""Bar labels are cut to this length; the tooltip has the full text."""

PLACED, OPEN_PLACED, ATTEMPT, BLOCKING, UNPLACED, UNCHECKED = (
    "placed",
    "open-placed",
    "attempt",
    "blocking",
    "unplaced",
    "unchecked",
)

_FILL: Final = {
    PLACED: "#5b8def",
    OPEN_PLACED: "#a9c2f5",
    ATTEMPT: "#f5a623",
    BLOCKING: "#e0393e",
    UNPLACED: "#c9c9c9",
    UNCHECKED: "#e6e6e6",
}


@dataclass(frozen=True)
class Bar:
    """One operation in a panel. ``x0``/``x1`` are in event-order units;
    ``point`` is where its linearization point is drawn (None if not placed)."""

    index: int
    lane: int
    x0: float
    x1: float
    is_open: bool
    role: str
    label: str
    detail: str
    point: float | None
    order_no: int | None


@dataclass(frozen=True)
class Panel:
    """One sub-history: its lanes (clients), bars and the linearization chain."""

    key: Hashable
    title: str
    verdict: Verdict
    lanes: tuple[Hashable, ...]
    bars: tuple[Bar, ...]
    chain: tuple[tuple[float, int], ...]
    width: float
    note: str = ""


def _ranks(ops: Sequence[Operation]) -> dict[float, int]:
    times = sorted(
        {op.invoke for op in ops} | {op.complete for op in ops if op.complete is not None}
    )
    return {t: r for r, t in enumerate(times)}


def _panel(result: CheckResult, part: PartitionResult) -> Panel:
    history = result.history
    ops = [history[i] for i in part.indices]
    rank = _ranks(ops)
    end = len(rank)
    lanes: list[Hashable] = []
    lane_of: dict[Hashable, int] = {}
    for op in sorted(ops, key=lambda o: o.invoke):
        if op.client not in lane_of:
            lane_of[op.client] = len(lanes)
            lanes.append(op.client)

    # Linearization points: the earliest event rank at which each operation
    # can sit, in order (always inside its interval for a legal order); points
    # sharing a rank are spread across that rank's column.
    position: dict[int, float] = {}
    slots: list[tuple[int, int]] = []
    t = 0
    for i in part.order:
        t = max(t, rank[history[i].invoke])
        slots.append((i, t))
    by_rank: dict[int, list[int]] = {}
    for i, r in slots:
        by_rank.setdefault(r, []).append(i)
    for r, members in by_rank.items():
        for k, i in enumerate(members):
            position[i] = r + 0.15 + 0.7 * (k + 0.5) / len(members)
    order_no = {i: n for n, i in enumerate(part.order, start=1)}

    witness = result.witness if result.witness and result.witness.partition == part.key else None
    attempted = {id(a.op) for a in witness.attempts} if witness else set()
    blocking = id(witness.blocking) if witness and witness.blocking else None
    model = (
        witness.model
        if witness
        else (result.model if part.key is None else result.model.partition_model(part.key))
    )

    bars = []
    for i in part.indices:
        op = history[i]
        x0 = rank[op.invoke] + 0.05
        x1 = (end + 0.5) if op.complete is None else rank[op.complete] + 0.95
        if i in position:
            role = OPEN_PLACED if op.complete is None else PLACED
        elif not part.checked:
            role = UNCHECKED
        elif id(op) == blocking:
            role = BLOCKING
        elif id(op) in attempted:
            role = ATTEMPT
        else:
            role = UNPLACED
        text = model.describe_operation(op.input, op.output)
        label = text if len(text) <= LABEL_CHARS_MAX else text[: LABEL_CHARS_MAX - 1] + "…"
        span = f"{op.invoke} .. {'(open)' if op.complete is None else op.complete}"
        detail = f"client {op.client}: {text}\ntime {span}" + (f"\n{op.meta}" if op.meta else "")
        if i in order_no:
            detail += f"\nlinearized #{order_no[i]}"
        bars.append(
            Bar(
                i,
                lane_of[op.client],
                x0,
                x1,
                op.complete is None,
                role,
                label,
                detail,
                position.get(i),
                order_no.get(i),
            )
        )
    chain = tuple((position[i], lane_of[history[i].client]) for i in part.order)
    what = "whole history" if part.key is None else f"key {part.key!r}"
    status = (
        part.verdict.value if part.checked else "not checked (another sub-history failed first)"
    )
    title = f"{what}: {status}, {len(ops)} operations"
    if part.verdict is Verdict.NOT_LINEARIZABLE:
        title += f", longest linearizable prefix {len(part.order)}"
    note = ""
    if witness is not None and witness.blocking is not None:
        stuck = witness.blocking
        note = (
            f"could not be placed: {model.describe_operation(stuck.input, stuck.output)}"
            f"\nstate after the prefix: {model.describe_state(witness.state)}"
        )
    return Panel(part.key, title, part.verdict, tuple(lanes), tuple(bars), chain, end + 1.0, note)


def layout(result: CheckResult, panels_max: int = PANELS_MAX) -> list[Panel]:
    """The panels to draw, failing sub-history first, then by key order."""
    parts = list(result.partitions)
    first = [p for p in parts if p.verdict is Verdict.NOT_LINEARIZABLE and p.checked]
    rest = [p for p in parts if p not in first]
    rest.sort(key=lambda p: (not p.checked, p.verdict is not Verdict.UNKNOWN))
    return [_panel(result, p) for p in (first + rest)[:panels_max]]


# --- HTML -------------------------------------------------------------------

_UNIT_PX: Final = 12.0
_LANE_PX: Final = 22.0
_LEFT_PX: Final = 70.0

_HATCH_CSS: Final = "repeating-linear-gradient(45deg,#fff 0 3px,#7a9be0 3px 6px)"

_CSS: Final = """
body { font: 14px system-ui, sans-serif; margin: 1.2em; color: #222; }
h1 { font-size: 1.5em; margin: 0 0 .3em; }
h1.bad { color: #c62828; } h1.ok { color: #2e7d32; } h1.unknown { color: #8d6e00; }
.summary { color: #555; margin: 0 0 1em; }
.legend span { display: inline-block; margin-right: 1.2em; }
.legend i { display: inline-block; width: 1.6em; height: .9em; margin-right: .3em;
            vertical-align: middle; border: 1px solid #555; }
section { margin: 1.2em 0; }
h2 { font-size: 1.05em; margin: .2em 0; }
.scroll { overflow-x: auto; border: 1px solid #ddd; background: #fcfcfc; }
svg text { font: 10px monospace; pointer-events: none; }
svg .lane text { font: 11px system-ui, sans-serif; fill: #444; }
svg rect.op { stroke: #333; stroke-width: .6; }
svg rect.op:hover, svg rect.op.hl { stroke: #000; stroke-width: 2; }
svg .chain { fill: none; stroke: #111; stroke-width: 1.3; }
svg circle { fill: #111; }
#info { position: fixed; right: 1em; bottom: 1em; max-width: 42em; white-space: pre-wrap;
        background: #fffbe6; border: 1px solid #d4b106; padding: .5em .8em; font: 12px monospace;
        display: none; }
.note { white-space: pre-wrap; color: #8e0000; background: #fff4f4; border-left: 3px solid #e0393e;
        padding: .3em .6em; margin: .3em 0; font: 12px monospace; }
pre { background: #f6f6f6; padding: .8em; overflow-x: auto; }
"""

_JS: Final = """
(function () {
  var info = document.getElementById('info');
  var bars = document.querySelectorAll('rect.op');
  bars.forEach(function (r) {
    r.addEventListener('mouseenter', function () {
      info.textContent = r.getAttribute('data-detail'); info.style.display = 'block';
      r.classList.add('hl');
    });
    r.addEventListener('mouseleave', function () {
      info.style.display = 'none'; r.classList.remove('hl');
    });
  });
  document.body.setAttribute('data-bars', String(bars.length));
  document.body.setAttribute('data-ready', 'yes');
})();
"""


def _svg(panel: Panel) -> str:
    width = _LEFT_PX + panel.width * _UNIT_PX + 10
    height = len(panel.lanes) * _LANE_PX + 16
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'role="img" aria-label="{html.escape(panel.title)}">',
        '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#ffffff"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#7a9be0" stroke-width="3"/></pattern></defs>',
        '<g class="lane">',
    ]
    for n, client in enumerate(panel.lanes):
        y = 8 + n * _LANE_PX
        if n % 2:
            out.append(
                f'<rect x="0" y="{y:.1f}" width="{width:.0f}" height="{_LANE_PX}" fill="#f1f3f6"/>'
            )
        out.append(f'<text x="4" y="{y + 15:.1f}">{html.escape(str(client))}</text>')
    out.append("</g>")

    def px(x: float) -> float:
        return _LEFT_PX + x * _UNIT_PX

    for bar in panel.bars:
        y = 8 + bar.lane * _LANE_PX + 3
        w = max(2.0, (bar.x1 - bar.x0) * _UNIT_PX)
        fill = (
            "url(#hatch)"
            if bar.is_open and bar.role in (PLACED, OPEN_PLACED, UNPLACED)
            else _FILL[bar.role]
        )
        out.append(
            f'<rect class="op {bar.role}" x="{px(bar.x0):.1f}" y="{y:.1f}" width="{w:.1f}" '
            f'height="{_LANE_PX - 6}" rx="2" fill="{fill}" '
            f'data-index="{bar.index}" data-detail="{html.escape(bar.detail)}">'
            f"<title>{html.escape(bar.detail)}</title></rect>"
        )
        if w > 7 * 6:
            chars = int(w / 6.2)
            label = bar.label if len(bar.label) <= chars else bar.label[: chars - 1] + "…"
            out.append(
                f'<text x="{px(bar.x0) + 3:.1f}" y="{y + 11:.1f}">{html.escape(label)}</text>'
            )
    if panel.chain:
        points = " ".join(
            f"{px(x):.1f},{8 + lane * _LANE_PX + _LANE_PX / 2:.1f}" for x, lane in panel.chain
        )
        out.append(f'<polyline class="chain" points="{points}"/>')
        for x, lane in panel.chain:
            out.append(
                f'<circle cx="{px(x):.1f}" cy="{8 + lane * _LANE_PX + _LANE_PX / 2:.1f}" r="2.6"/>'
            )
    out.append("</svg>")
    return "\n".join(out)


def to_html(result: CheckResult, title: str = "history") -> str:
    """The whole page as a string: no external resources, opens from disk."""
    panels = layout(result)
    css_class = {
        Verdict.LINEARIZABLE: "ok",
        Verdict.NOT_LINEARIZABLE: "bad",
        Verdict.UNKNOWN: "unknown",
    }[result.verdict]
    summary = result.describe().splitlines()[1]
    legend = (
        "".join(
            f'<span><i style="background:{_FILL[role]}"></i>{text}</span>'
            for role, text in (
                (PLACED, "linearized"),
                (BLOCKING, "had to go next, could not"),
                (ATTEMPT, "tried next, dead end"),
                (UNPLACED, "not reached"),
            )
        )
        + f'<span><i style="background:{_HATCH_CSS}"></i>in doubt (open)</span>'
    )
    body = [
        f'<h1 class="{css_class}">{html.escape(str(result.verdict))}</h1>',
        f'<p class="summary">{html.escape(title)}: {html.escape(summary)}. '
        "Bars: operations from invocation to completion, one lane per client, time in event "
        "order. Dots joined by a line: the linearization found, in order.</p>",
        f'<div class="legend">{legend}</div>',
    ]
    hidden = len(result.partitions) - len(panels)
    for n, panel in enumerate(panels):
        note = f'<p class="note">{html.escape(panel.note)}</p>' if panel.note else ""
        body.append(
            f'<section id="panel-{n}"><h2>{html.escape(panel.title)}</h2>{note}'
            f'<div class="scroll">{_svg(panel)}</div></section>'
        )
    if hidden > 0:
        body.append(f"<p>{hidden} more sub-histories not drawn.</p>")
    body.append(
        "<details open><summary>Verdict as text</summary>"
        f"<pre>{html.escape(result.describe())}</pre></details>"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}: {html.escape(str(result.verdict))}</title>"
        f"<style>{_CSS}</style></head><body>\n"
        + "\n".join(body)
        + '\n<div id="info"></div>\n'
        + f"<script>{_JS}</script>\n</body></html>\n"
    )


def write_html(result: CheckResult, path: str | Path, title: str | None = None) -> Path:
    """Write the picture as one self-contained HTML file; returns its path."""
    p = Path(path)
    p.write_text(to_html(result, title or p.stem), encoding="utf-8")
    return p


# --- PNG --------------------------------------------------------------------

_PNG_AXES_PX: Final = 1300.0
"""Roughly the width of a panel's plotting area at 13 in and 110 dpi."""
_PNG_CHAR_PX: Final = 6.0
"""Roughly the width of one 6.5 pt monospace character at 110 dpi."""


def write_png(
    result: CheckResult,
    path: str | Path,
    title: str | None = None,
    panels_max: int = PNG_PANELS_MAX,
    window: int | None = None,
) -> Path:
    """Write the picture as a PNG (needs matplotlib); returns its path.

    ``window``: draw only this many event columns around the failure (or the
    start), so that a long history stays legible.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    panels = layout(result, len(result.partitions))
    checked = [p for p in panels if not all(b.role == UNCHECKED for b in p.bars)]
    panels = (checked or panels)[:panels_max]  # a picture: leave out what was not checked
    heights = [max(1.5, 0.32 * len(p.lanes) + 0.7) for p in panels]
    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(13, sum(heights) + 0.6),
        squeeze=False,
        gridspec_kw={"height_ratios": heights},
    )
    for ax, panel in zip(axes[:, 0], panels, strict=True):
        lo, hi = 0.0, panel.width
        if window is not None and panel.width > window:
            focus = [b.x0 for b in panel.bars if b.role == BLOCKING]
            centre = focus[0] if focus else window / 2
            lo = max(0.0, min(centre - window * 0.7, panel.width - window))
            hi = lo + window
        for bar in panel.bars:
            if bar.x1 < lo or bar.x0 > hi:
                continue
            y = len(panel.lanes) - 1 - bar.lane
            hatch = "////" if bar.is_open else None
            face = "white" if bar.is_open and bar.role in (PLACED, OPEN_PLACED) else _FILL[bar.role]
            ax.add_patch(
                Rectangle(
                    (bar.x0, y - 0.36),
                    bar.x1 - bar.x0,
                    0.72,
                    facecolor=face,
                    edgecolor="#333",
                    linewidth=0.5,
                    hatch=hatch,
                )
            )
            visible = min(bar.x1, hi) - max(bar.x0, lo)
            chars = int(visible * _PNG_AXES_PX / (hi - lo) / _PNG_CHAR_PX) if hi > lo else 0
            if chars >= 6:
                label = bar.label if len(bar.label) <= chars else bar.label[: chars - 1] + "…"
                ax.text(
                    max(bar.x0, lo) + 0.1,
                    y,
                    label,
                    va="center",
                    ha="left",
                    fontsize=6.5,
                    family="monospace",
                    clip_on=True,
                )
        for bar in panel.bars:
            if bar.role == BLOCKING and panel.note:
                y = len(panel.lanes) - 1 - bar.lane
                ax.annotate(
                    panel.note,
                    xy=(bar.x1, y),
                    xytext=(bar.x1 + 0.04 * (hi - lo), y + 0.1),
                    fontsize=7.5,
                    va="center",
                    color="#8e0000",
                    bbox={"boxstyle": "round", "fc": "#fff4f4", "ec": "#e0393e"},
                    arrowprops={"arrowstyle": "->", "color": "#e0393e"},
                )
        if panel.chain:
            xs = [x for x, _ in panel.chain]
            ys = [len(panel.lanes) - 1 - lane for _, lane in panel.chain]
            ax.plot(xs, ys, color="#111", linewidth=0.9, marker="o", markersize=2.6)
        ax.set_xlim(lo, hi)
        ax.set_ylim(-0.6, len(panel.lanes) - 0.4)
        ax.set_yticks(range(len(panel.lanes)))
        ax.set_yticklabels([str(c) for c in reversed(panel.lanes)], fontsize=7)
        ax.set_ylabel("client", fontsize=8)
        ax.set_xlabel("events, in time order", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        color = {"not linearizable": "#c62828", "linearizable": "#2e7d32"}.get(
            panel.verdict.value, "#8d6e00"
        )
        ax.set_title(panel.title, fontsize=9, loc="left", color=color)
    head = f"{title or Path(path).stem}: {result.verdict}"
    fig.suptitle(head, fontsize=11, x=0.01, ha="left")
    from matplotlib.patches import Patch

    fig.legend(
        handles=[
            Patch(facecolor=_FILL[PLACED], edgecolor="#333", label="linearized (dots: in order)"),
            Patch(facecolor=_FILL[BLOCKING], edgecolor="#333", label="had to go next, could not"),
            Patch(facecolor=_FILL[ATTEMPT], edgecolor="#333", label="tried next, dead end"),
            Patch(facecolor=_FILL[UNPLACED], edgecolor="#333", label="not reached"),
            Patch(facecolor="white", edgecolor="#333", hatch="////", label="in doubt (open)"),
        ],
        loc="upper right",
        ncol=5,
        fontsize=7.5,
        frameon=False,
    )
    fig.tight_layout()
    p = Path(path)
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p
