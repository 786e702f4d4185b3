"""Text and HTML primitives every layer may use: byte/second/count formatting (:mod:`.format`), the table model
rendered to aligned text and themed HTML (:mod:`.table`), the CSS and plotly template that follow JupyterLab's theme
(:mod:`.theme`), and escaping of untrusted text (:mod:`.untrusted`).

They sit below the features (events, memory, explain, bundle) and the views, and import nothing else from xlakit,
so a feature's ``repr`` can format bytes without importing the view layer above it.
"""
