"""Charts that show their values on hover, for the page only (plotly); summary.md keeps the PNGs of charts.py.

plotly.js is embedded once, inline, in the page's head (plotly_js), so index.html stays one file that works offline
(no CDN); each figure is a <div> and the call that draws it into that div with the script already loaded.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from markupsafe import Markup

HEIGHT = 360  # px: a figure's height less its legend; its width follows the page (responsive)
# matplotlib's default cycle (tab10), so a series has the same colour here as in the PNGs beside summary.md.
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
CONFIG = {"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["select2d", "lasso2d"]}


@dataclass(frozen=True)
class Point:
    workers: int
    rate: float
    low: float | None  # the rate's 95% interval (None: none)
    high: float | None
    efficiency: float | None  # a fraction; None where the series has no smaller cell to divide by
    hover: str  # what the hover label says of the point (HTML: escaped by the caller)


@dataclass(frozen=True)
class Series:
    name: str
    points: tuple[Point, ...]  # by worker count


@functools.cache
def available() -> bool:
    """Whether plotly imports here: an environment that lacks it (a GPU machine's own Python, offline) still gets
    its report, with the PNGs and without the hover charts, which the page says."""
    import importlib.util

    return importlib.util.find_spec("plotly") is not None


@functools.cache
def plotly_js() -> Markup:
    """plotly.js inline, for the page's head (once per page, whatever the number of figures)."""
    from plotly.offline import get_plotlyjs

    return Markup(f'<script type="text/javascript">{get_plotlyjs()}</script>')


def scaling_figure(div_id: str, series: list[Series], rate_unit: str, note: str = "") -> Markup:
    """Rate against workers (bars: 95% interval) and scaling efficiency against workers, side by side, one line
    per series in the same colour in both; `note` is written under the plots (what was left out)."""
    import plotly.graph_objects as go
    import plotly.io as pio
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.09,
                        subplot_titles=(f"{rate_unit} vs workers (bars: 95% CI)", "scaling efficiency"))
    for i, s in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        xs = [p.workers for p in s.points]
        hover = [p.hover for p in s.points]
        fig.add_trace(go.Scatter(
            x=xs, y=[p.rate for p in s.points], name=s.name, legendgroup=s.name, mode="lines+markers",
            line={"color": colour}, text=hover, hovertemplate="%{text}<extra></extra>",
            error_y={"type": "data", "symmetric": False, "thickness": 1, "width": 3,
                     "array": [0 if p.high is None else max(p.high - p.rate, 0) for p in s.points],
                     "arrayminus": [0 if p.low is None else max(p.rate - p.low, 0) for p in s.points]}), 1, 1)
        scaled = [p for p in s.points if p.efficiency is not None]
        if len(scaled) > 1:  # a lone cell has nothing to scale against
            fig.add_trace(go.Scatter(
                x=[p.workers for p in scaled], y=[100 * p.efficiency for p in scaled], name=s.name,
                legendgroup=s.name, showlegend=False, mode="lines+markers", line={"color": colour},
                text=[p.hover for p in scaled], hovertemplate="%{text}<extra></extra>"), 1, 2)
    ticks = sorted({p.workers for s in series for p in s.points})
    axis = {"type": "log", "tickvals": ticks, "ticktext": [str(t) for t in ticks], "title": {"text": "workers"},
            "showgrid": True, "gridcolor": "#eee", "linecolor": "#999", "zeroline": False}
    fig.update_xaxes(**axis)
    fig.update_yaxes(showgrid=True, gridcolor="#eee", linecolor="#999", zeroline=False, rangemode="tozero")
    fig.update_yaxes(title={"text": f"{rate_unit} (global, median)"}, row=1, col=1)
    fig.update_yaxes(title={"text": "% of ideal vs the series' smallest"}, row=1, col=2)
    fig.add_hline(y=100, line={"color": "#999", "width": 1}, row=1, col=2)
    height = HEIGHT + 20 * ((len(series) + 2) // 3)  # room for the legend's rows below the plots
    fig.update_layout(template="none", height=height, margin={"l": 60, "r": 10, "t": 45, "b": 40},
                      hovermode="closest", font={"size": 11}, plot_bgcolor="white",
                      legend={"orientation": "h", "y": -0.22, "font": {"size": 10}})
    if note:
        fig.add_annotation(text=note, xref="paper", yref="paper", x=1, y=1.08, showarrow=False,
                           xanchor="right", font={"size": 10, "color": "#555"})
    html = pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id, config=CONFIG,
                       default_height=f"{height}px")
    return Markup(html)
