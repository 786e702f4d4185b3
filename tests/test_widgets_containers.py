"""xlakit widgets inside ipywidgets containers (HBox, VBox, Tab, Output) leave a readable static snapshot in a
saved notebook and in nbconvert HTML, as a widget displayed alone does; plain containers display as before."""

from __future__ import annotations

import re

import ipywidgets as ipw
import plotly.graph_objects as go
import pytest
from IPython import get_ipython
from IPython.testing.globalipapp import start_ipython
from IPython.utils.capture import capture_output

import xlakit
from xlakit import widgets
from xlakit.events import Event

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def ip():
    shell = start_ipython() or get_ipython()  # started once per session
    widgets.containers.install(shell)
    return shell


def _outputs(ip, obj):
    from IPython.display import display

    with capture_output() as cap:
        display(obj)
    return [o.data for o in cap.outputs]


def test_widgets_is_an_attribute_of_a_bare_import():
    assert xlakit.widgets.dashboard is widgets.dashboard
    assert callable(xlakit.widgets.snapshot)


def test_nested_chart_and_timeline_leave_their_numbers_in_the_box_snapshot(ip):
    timeline = widgets.CacheTimeline([Event("compile", name="jit_nested_step", duration_s=0.25, origin="user")],
                                     live=False)
    chart = widgets.Chart(go.Figure(go.Bar(x=["a"], y=[1], name="nested-bar-trace")))
    tabs = ipw.Tab(children=[timeline, ipw.Label("plain label 77")], titles=("events", "other"))
    outs = _outputs(ip, ipw.HBox([chart, tabs]))
    assert "application/vnd.jupyter.widget-view+json" in outs[0]  # the live view comes first, unchanged
    static = outs[1]["text/html"]
    assert "xlakit-static" in static and "nested-bar-trace" in static and "jit_nested_step" in static
    assert "<h5>events</h5>" in static and "plain label 77" in static
    timeline.close()
    chart.close()


def test_plain_containers_display_as_before(ip):
    outs = _outputs(ip, ipw.VBox([ipw.Label("no xlakit here")]))
    assert len(outs) == 1 and "text/html" not in outs[0]


def test_output_keeps_the_xlakit_widgets_it_captured_until_cleared(ip):
    out = ipw.Output()
    chart = widgets.Chart(go.Figure(go.Scatter(x=[1], y=[2], name="captured-trace")))
    out.msg_id = "cell-1"  # what `with out:` sets inside a kernel
    with capture_output():
        chart._ipython_display_()
    out.msg_id = ""
    out.append_stdout("printed 4242\n")
    body = widgets.snapshot(ipw.VBox([ipw.HTML("<b>heading 12</b>"), out]), include_plotlyjs=False)
    assert "captured-trace" in body and "heading 12" in body and "printed 4242" in body
    out.clear_output()
    assert "captured-trace" not in widgets.snapshot(out, include_plotlyjs=False)
    with pytest.raises(TypeError, match="ipywidgets widget"):
        widgets.snapshot("not a widget")
    chart.close()


def test_nested_widgets_survive_nbconvert_offline(tmp_path, monkeypatch):
    """The executed notebook exported to HTML with every widget script removed still shows the nested
    widgets' numbers (the notebook converter cannot draw widget views offline)."""
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    monkeypatch.setenv("XLAKIT_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    cells = ["import ipywidgets as ipw, plotly.graph_objects as go\nfrom xlakit import widgets",
             "ipw.HBox([ipw.Label('side'), widgets.Chart(go.Figure(go.Bar(x=['a'], y=[1], name='hbox-trace-31')))])",
             "out = ipw.Output()\nwith out:\n    display(widgets.Chart(go.Figure(go.Bar(x=['b'], y=[2], "
             "name='output-trace-47'))))\nipw.VBox([ipw.HTML('<b>memory 59</b>'), out])"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert not [o for c in nb.cells for o in c.outputs if o.output_type == "error"]
    page, _ = HTMLExporter(exclude_input=True).from_notebook_node(nb)
    # What a reader sees with no widget manager: the widget views and the saved widget state are inert.
    offline = re.sub(r"<script type=.application/vnd\.jupyter\.widget-(state|view)\+json.>.*?</script>", "", page,
                     flags=re.S)
    assert "hbox-trace-31" in offline and "output-trace-47" in offline and "memory 59" in offline


def test_a_live_timelines_saved_snapshot_follows_its_redraws_after_each_cell(ip):
    """Fault: a timeline's static snapshot (what a saved notebook and nbconvert keep) was taken when it was
    displayed: a researcher's saved notebook showed 135 of the 247 events the live view held. After each cell,
    a shown widget that redrew gets a new snapshot; one that did not is left alone."""
    from IPython.display import display

    from xlakit.events import EventLog

    log = EventLog()
    log.emit("compile", name="jit_before_display", duration_s=0.1, origin="user")
    timeline = widgets.CacheTimeline(log, live=False)
    other = widgets.CacheTimeline(EventLog(), live=False)
    with capture_output() as cap:
        display(timeline)
        display(other)
    updates = []

    class Handle:
        def __init__(self, who):
            self.who = who

        def update(self, data, raw=False):
            updates.append((self.who, data["text/html"]))

    timeline.__dict__["_snapshot_handles"] = [Handle("timeline")]  # the display handles, observed
    other.__dict__["_snapshot_handles"] = [Handle("other")]
    assert "jit_before_display" in cap.outputs[1].data["text/html"]
    log.emit("compile", name="jit_after_display", duration_s=0.2, origin="user")
    timeline.refresh()                                    # what the live thread does when events arrive
    ip.events.trigger("post_run_cell", None)              # the cell ends
    assert [who for who, _ in updates] == ["timeline"] and "jit_after_display" in updates[0][1]
    ip.events.trigger("post_run_cell", None)              # nothing changed since: no re-render
    assert len(updates) == 1
    timeline.close()
    other.close()
