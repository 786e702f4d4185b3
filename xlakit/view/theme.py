"""Theme-aware styling: CSS on JupyterLab's theme variables and a plotly template that follows the theme.

Colours come from JupyterLab's CSS variables (``--jp-ui-font-color1``, ``--jp-layout-color1``,
``--jp-border-color2`` ...) with light fallbacks for pages outside JupyterLab (a saved HTML file, the report),
so tables and notes read in the light and the dark theme alike. plotly draws colours into SVG attributes,
which CSS variables cannot reach; so figures use :data:`PLOTLY_TEMPLATE` (transparent backgrounds) and
:data:`STYLE` recolours their text, grid and legend with the same variables (``!important`` beats plotly's
inline styles). No dependencies.
"""

from __future__ import annotations

__all__ = ["STYLE", "PLOTLY_TEMPLATE", "plotly_template", "LEGEND", "BASE_LAYOUT", "FONT", "MUTED", "BORDER",
           "ROLE_COLORS"]

FONT = "var(--jp-ui-font-color1, #1a1a1a)"
MUTED = "var(--jp-ui-font-color2, #555)"
BORDER = "var(--jp-border-color2, #d8d8d8)"

#: One stylesheet for every xlakit table, note, chart and widget (idempotent: safe to include many times).
_RULES = (
    ('.xlakit-snapshot, .xlakit-view {color: var(--jp-ui-font-color1, #1a1a1a); '
     'font-family: var(--jp-ui-font-family, sans-serif); max-width: 100%;}'),
    '.xlakit-snapshot h4 {margin: 4px 0; color: var(--jp-ui-font-color0, #000);}',
    '.xlakit-table-wrap {max-width: 100%; overflow-x: auto;}',
    ('.xlakit-table {border-collapse: collapse; font-size: 12px; color: var(--jp-ui-font-color1, #1a1a1a); '
     'background: transparent;}'),
    ('.xlakit-table th, .xlakit-table td {padding: 2px 8px; '
     'border-bottom: 1px solid var(--jp-border-color2, #e0e0e0); text-align: left; vertical-align: top;}'),
    ('.xlakit-table th {background: var(--jp-layout-color2, #f2f2f2); color: var(--jp-ui-font-color0, '
     '#000); font-weight: 600; white-space: nowrap;}'),
    '.xlakit-table caption {text-align: left; font-weight: 600; padding: 2px 0;}',
    '.xlakit-table .xlakit-num {text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums;}',
    '.xlakit-table .xlakit-nowrap {white-space: nowrap;}',
    '.xlakit-na {color: var(--jp-ui-font-color3, #999);}',
    '.xlakit-note {color: var(--jp-ui-font-color2, #555); font-size: 12px; margin: 2px 0;}',
    ('.xlakit-error {border: 1px solid var(--jp-error-color1, #d62728); background: var(--jp-error-color3, '
     '#fff5f5); color: var(--jp-ui-font-color1, #1a1a1a); padding: 4px 8px; font-size: 12px;}'),
    '.xlakit-chart {width: 100%; min-width: 0;}',
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

#: Legend placement of every chart: above the plot, left-aligned, wrapping (never over the data at 800 px).
LEGEND = dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0)
#: Layout every chart starts from: margins in pixels, :data:`PLOTLY_TEMPLATE`, 380 px high, width of its cell.
BASE_LAYOUT = dict(margin=dict(l=60, r=20, t=90, b=40), template=PLOTLY_TEMPLATE, height=380, autosize=True)

#: The roles :func:`xlakit.memory.attribute` gives a logical buffer (``xlakit.memory.attribution.ROLES``) plus
#: ``"unknown"``, in legend order, each with its one colour: every memory picture (live bytes over program
#: order, buffer lifetimes, the peak treemap) colours a role the same.
ROLE_COLORS = {"parameter": "#1f77b4", "optimizer state": "#17becf", "aliased": "#7f7f7f",
               "output": "#ff7f0e", "residual": "#d62728", "recomputed": "#e377c2", "temporary": "#2ca02c",
               "constant": "#9467bd", "thread-local": "#bcbd22", "unknown": "#c7c7c7"}
