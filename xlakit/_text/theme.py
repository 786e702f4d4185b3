"""Theme-aware styling: CSS on JupyterLab's theme variables and a plotly template that follows the theme.

Colours come from JupyterLab's CSS variables (``--jp-ui-font-color1``, ``--jp-layout-color1``,
``--jp-border-color2`` ...) with light fallbacks for pages outside JupyterLab (a saved HTML file, the report),
so tables and notes read in the light and the dark theme alike. plotly draws colours into SVG attributes,
which CSS variables cannot reach; so figures use :data:`PLOTLY_TEMPLATE` (transparent backgrounds) and
:data:`STYLE` recolours their text, grid and legend with the same variables (``!important`` beats plotly's
inline styles). The layout every chart shares lives here too: the legend under the plot, titles wrapped to the
narrowest chart, byte axes that always show a labelled range from 0. No dependencies beyond
:mod:`xlakit._text.format`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["STYLE", "PLOTLY_TEMPLATE", "plotly_template", "LEGEND", "BASE_LAYOUT", "FONT", "MUTED", "BORDER",
           "ROLE_COLORS", "NARROW_WIDTH", "legend_rows", "legend_space", "title_lines", "title_layout",
           "TITLE_LINE", "byte_axis"]

FONT = "var(--jp-ui-font-color1, #1a1a1a)"
MUTED = "var(--jp-ui-font-color2, #555)"
BORDER = "var(--jp-border-color2, #d8d8d8)"

#: One stylesheet for every xlakit table, note, chart and widget (idempotent: safe to include many times).
_RULES = (
    ('.xlakit-snapshot, .xlakit-view {color: var(--jp-ui-font-color1, #1a1a1a); '
     'font-family: var(--jp-ui-font-family, sans-serif); max-width: 100%;}'),
    '.xlakit-snapshot h4 {margin: 4px 0; color: var(--jp-ui-font-color0, #000);}',
    # A table wider than its cell scrolls sideways as one, and says so: a shadow on the side with more to see
    # (the cover gradients scroll with the content and hide the shadow at either end; no script needed).
    ('.xlakit-table-wrap {max-width: 100%; overflow-x: auto; background: '
     'linear-gradient(to right, var(--jp-layout-color0, #fff) 30%, rgba(0,0,0,0)) left / 32px 100% no-repeat local, '
     'linear-gradient(to left, var(--jp-layout-color0, #fff) 30%, rgba(0,0,0,0)) right / 32px 100% no-repeat local, '
     'linear-gradient(to right, rgba(128,128,128,0.55), rgba(128,128,128,0)) left / 12px 100% no-repeat scroll, '
     'linear-gradient(to left, rgba(128,128,128,0.55), rgba(128,128,128,0)) right / 12px 100% no-repeat scroll;}'),
    # An HTML widget of a view may be narrower than its table: by default (min-width: auto) its content grew to
    # the table's width and the whole view scrolled sideways, the table's own scroll and hint never showing.
    '[class*="xlakit-"] .widget-html-content {min-width: 0; max-width: 100%;}',
    '.xlakit-allocator-row .widget-html-content {line-height: 1.4;}',  # a wrapped peak note, not 28 px lines
    # a summary wraps at spaces and at the break points html_wrappable marks, never inside a name
    ('.xlakit-peak-summary, .xlakit-peak-summary pre {white-space: normal; overflow-wrap: break-word; '
     'max-width: 100%; line-height: 1.4;}'),
    '.xlakit-peak-summary pre {font-family: var(--jp-code-font-family, monospace);}',
    ('.xlakit-table {border-collapse: collapse; font-size: 12px; color: var(--jp-ui-font-color1, #1a1a1a); '
     'background: transparent;}'),
    ('.xlakit-table th, .xlakit-table td {padding: 2px 8px; line-height: 1.35; white-space: normal; '
     'border-bottom: 1px solid var(--jp-border-color2, #e0e0e0); vertical-align: top;}'),
    # JupyterLab right-aligns every cell of an HTML output (`:not(.jp-RenderedMarkdown).jp-RenderedHTMLCommon
    # td`, specificity 0,2,1): the doubled class outranks it, so text (a reason, a source line) reads left-aligned.
    '.xlakit-table.xlakit-table th, .xlakit-table.xlakit-table td {text-align: left;}',
    ('.xlakit-table th {background: var(--jp-layout-color2, #f2f2f2); color: var(--jp-ui-font-color0, '
     '#000); font-weight: 600;}'),
    '.xlakit-table caption {text-align: left; font-weight: 600; padding: 2px 0;}',
    '.xlakit-table.xlakit-table .xlakit-num {text-align: right; font-variant-numeric: tabular-nums;}',
    '.xlakit-table td.xlakit-num {white-space: nowrap;}',  # a number never wraps; its header may
    '.xlakit-table .xlakit-nowrap {white-space: nowrap;}',
    # long text (a source line, a layer, a pytree path) wraps in a column no narrower than a short phrase
    '.xlakit-table td.xlakit-wrap {min-width: 6em; max-width: 36em; overflow-wrap: break-word;}',
    '.xlakit-na {color: var(--jp-ui-font-color3, #999);}',
    '.xlakit-note {color: var(--jp-ui-font-color2, #555); font-size: 12px; margin: 2px 0; line-height: 1.4;}',
    ('.xlakit-error {border: 1px solid var(--jp-error-color1, #d62728); background: var(--jp-error-color3, '
     '#fff5f5); color: var(--jp-ui-font-color1, #1a1a1a); padding: 4px 8px; font-size: 12px;}'),
    '.xlakit-chart {width: 100%; min-width: 0;}',
    # A full-width child of a view's box (a chart, a nested box) keeps ipywidgets' margin on each side: at 100 %
    # it was 4 px wider than the box, which then scrolled sideways (JupyterLab trial, 848 px cell: 852 px).
    ('.widget-box[class*="xlakit-"] > .jupyter-widgets, [class*="xlakit-"] .widget-box > .jupyter-widgets '
     '{max-width: calc(100% - 2 * var(--jp-widgets-margin, 2px));}'),
    '.xlakit-chart .main-svg {background: transparent !important;}',
    '.xlakit-chart .main-svg text {fill: var(--jp-ui-font-color1, #1a1a1a) !important;}',
    ('.xlakit-chart .main-svg .gridlayer path, .xlakit-chart .main-svg .zerolinelayer path '
     '{stroke: var(--jp-border-color2, #e0e0e0) !important;}'),
    '.xlakit-chart .main-svg .legend .bg {fill: transparent !important;}',
    '.xlakit-chart .main-svg .hoverlayer .hovertext text {fill: #111 !important;}',
    '.xlakit-chart .main-svg .hoverlayer .hovertext path {fill: #fff !important;}',
    '.xlakit-chart .main-svg .treemaplayer .slicetext text {fill: #111 !important;}',
    '.xlakit-chart .modebar-btn path {fill: var(--jp-ui-font-color2, #555) !important;}',
    '.xlakit-controls {display: flex; flex-wrap: wrap; gap: 4px 8px; align-items: center;}',
    '.xlakit-spark polyline {stroke: var(--jp-brand-color1, #1f77b4);}',
    '.xlakit-spark circle {fill: var(--jp-brand-color1, #1f77b4);}',
)
STYLE = "<style class='xlakit-style'>\n" + "\n".join(_RULES) + "\n</style>"


def plotly_template() -> dict:
    """The plotly template of every xlakit figure (a plain dict; ``layout.template`` accepts it): transparent
    backgrounds, neutral grid, automatic margins so long tick labels and legends are not clipped."""
    return {"layout": {
        "paper_bgcolor": "rgba(0,0,0,0)", "plot_bgcolor": "rgba(0,0,0,0)",
        "font": {"family": "sans-serif", "size": 12, "color": "#444"},
        "xaxis": {"gridcolor": "rgba(128,128,128,0.25)", "zerolinecolor": "rgba(128,128,128,0.5)",
                  "automargin": True, "linecolor": "rgba(128,128,128,0.5)"},
        "yaxis": {"gridcolor": "rgba(128,128,128,0.25)", "zerolinecolor": "rgba(128,128,128,0.5)",
                  "automargin": True, "linecolor": "rgba(128,128,128,0.5)"},
        "legend": {"bgcolor": "rgba(0,0,0,0)"},
        "colorway": ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                     "#bcbd22", "#17becf"],
        "hoverlabel": {"bgcolor": "white", "font": {"color": "#111"}},
    }}


#: :func:`plotly_template` as a constant.
PLOTLY_TEMPLATE = plotly_template()

#: Legend placement of every chart: horizontal, at the bottom left of the figure (``"container"`` references:
#: plotly reserves the rows it wraps into below the x axis and its labels), its title above the entries. A
#: legend above the plot grew upward into the chart's title as a narrow window (a 500 px notebook column)
#: wrapped it into more rows; down here more rows only push the bottom edge.
LEGEND: dict[str, Any] = dict(orientation="h", xref="container", yref="container", y=0, yanchor="bottom",
                              xanchor="left", x=0, title=dict(side="top"))
#: Layout every chart starts from: margins in pixels (the top one holds a one-line title), :data:`PLOTLY_TEMPLATE`,
#: 380 px high, width of its cell.
BASE_LAYOUT: dict[str, Any] = dict(margin=dict(l=60, r=20, t=56, b=40), template=PLOTLY_TEMPLATE, height=380,
                                   autosize=True)
#: The narrowest chart width (px) the layout is sized for (an 800 px JupyterLab window with the file browser
#: open leaves about 500 px).
NARROW_WIDTH = 400
_LEGEND_ROW = 21  # px: one row of 12 px legend entries
_CHAR = 7.0  # px: the average width of a 12 px sans-serif character
_TITLE_CHAR = 7.4  # px: the same at the title's 16.8 px (measured in chromium: 45 characters, 332 px)
#: px a title's second and later lines add to the top margin.
TITLE_LINE = 22


def title_lines(text: str, width: int = NARROW_WIDTH, *, char_px: float = _TITLE_CHAR) -> list[str]:
    """A chart title cut at spaces into lines that fit ``width`` px (plotly never wraps a title: a long one ran
    past both edges of a narrow chart), for characters ``char_px`` wide on average (a title's by default).
    Lines the title already breaks with ``<br>`` stay; one holding markup (``<sub>``…) is kept whole."""
    per_line = max(10, int((width - 20) // char_px))
    out: list[str] = []
    for line in str(text).split("<br>"):
        if "<" in line or len(line) <= per_line:
            out.append(line)
            continue
        current = ""
        for word in line.split(" "):
            if current and len(current) + 1 + len(word) > per_line:
                out.append(current)
                current = word
            else:
                current = f"{current} {word}" if current else word
        out.append(current)
    return out


def title_layout(text: str, margin: dict) -> dict:
    """``title`` (its :func:`title_lines` joined by ``<br>``, as a dict: plotly.js 3+ draws no bare-string
    title) and ``margin`` with room at the top for every line past the first, as layout keys."""
    lines = title_lines(text)
    return {"title": {"text": "<br>".join(lines)},
            "margin": {**margin, "t": int(margin.get("t", 0)) + TITLE_LINE * (len(lines) - 1)}}


def legend_rows(names: list[str], width: int = NARROW_WIDTH, *, left: int = 60, right: int = 20,
                titled: bool = False) -> int:
    """How many rows a horizontal :data:`LEGEND` of entries ``names`` takes in a figure ``width`` px wide whose
    plot has margins ``left`` and ``right`` (px): plotly wraps such a legend within the plot's width, as a grid
    of equal columns as wide as its widest entry (symbol 40 px + text); a legend ``titled`` has a row for its
    title. 0 when plotly draws no legend (fewer than two entries). An estimate from character widths: what
    the figure's height adds so a wrapped legend does not squeeze the plot (where it goes is plotly's own)."""
    if len(names) < 2:
        return 0
    entry = 40 + _CHAR * max(len(n) for n in names)
    per_row = max(1, int((width - left - right) // entry))
    return -(-len(names) // per_row) + int(titled)


def legend_space(fig, width: int = NARROW_WIDTH, *, left: int = 60, right: int = 20, titled: bool = False) -> int:
    """Pixels the :func:`legend_rows` of plotly figure ``fig``'s legend entries (its named traces not hidden from
    the legend) take at ``width`` px, plus a gap above; 0 without a legend. ``fig`` is a ``go.Figure`` or a
    plotly dict ``{"data": [...], "layout": {...}}``."""
    if isinstance(fig, dict):
        traces = [(t.get("name"), t.get("showlegend", t.get("type") != "treemap")) for t in fig.get("data", [])]
        asked = fig.get("layout", {}).get("showlegend")
    else:  # treemaps have no legend entry (no ``showlegend`` property at all)
        traces = [(t.name, getattr(t, "showlegend", False)) for t in fig.data]
        asked = fig.layout.showlegend
    names = [str(name) for name, shown in traces if name and shown is not False]
    if asked and len(names) == 1:  # a legend asked for even with one entry
        names.append(names[0])
    rows = legend_rows(names, width, left=left, right=right, titled=titled)
    return rows * _LEGEND_ROW + 10 if rows else 0


def byte_axis(values) -> dict:
    """Layout of an axis of bytes spanning ``values`` (and 0): ticks in binary units
    (:func:`~xlakit._text.format.byte_ticks`) and an explicit range from 0 (or 5% past the lowest value, when
    one is negative) to 5% past the highest, so ticks show whatever plotly's autorange would do: on one point (a
    sweep of one batch size) it zoomed around that value, between two ticks, and drew none. Only zeros: 0 to
    1 byte."""
    from xlakit._text.format import _missing, byte_ticks

    vals, text = byte_ticks(values)
    data = [float(v) for v in values if not _missing(v)]  # type: ignore[arg-type]
    lo = min([0.0, *(1.05 * v for v in data)])
    hi = max([0.0, *(1.05 * v for v in data)])
    return dict(tickmode="array", tickvals=vals, ticktext=text, range=[lo, hi if hi > lo else lo + 1.0],
                autorange=False, rangemode="tozero")


#: The roles :func:`xlakit.memory.attribute` gives a logical buffer (``xlakit.memory.attribution.ROLES``) plus
#: ``"unknown"``, in legend order, each with its one colour: every memory picture (live bytes over program
#: order, buffer lifetimes, the peak treemap) colours a role the same.
ROLE_COLORS = {"parameter": "#1f77b4", "optimizer state": "#17becf", "aliased": "#7f7f7f",
               "output": "#ff7f0e", "residual": "#d62728", "recomputed": "#e377c2", "temporary": "#2ca02c",
               "constant": "#9467bd", "thread-local": "#bcbd22", "unknown": "#c7c7c7"}
