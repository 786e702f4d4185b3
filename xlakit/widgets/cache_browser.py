""":class:`CacheBrowser`: the entries of a cache folder, per-partition totals, verify / evict / explain.

Stands on the JAX-free folder API (:class:`xlakit.cache.CacheFolder`, through :mod:`xlakit.view.folder`):
browsing a cache installs no JAX hooks; only explaining makes an ``ExecutableCache``, closed right after.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets
import traitlets

from xlakit._text.format import fmt_bytes
from xlakit._text.untrusted import html_text
from xlakit.view import cache as _cache_view
from xlakit.view import folder as _folder
from xlakit.widgets import _data, _snapshots
from xlakit.widgets._base import View

__all__ = ["CacheBrowser"]


class CacheBrowser(View, widgets.VBox):
    """The entries of a cache folder as a table, with filters, per-partition totals and actions.

    A view over :meth:`xlakit.cache.CacheFolder.entries` (no JAX hooks are installed to list a cache): name,
    argument signature (dtype, shape, sharding and donation per argument, from the entry header's ``signature``
    field; "arguments not recorded" when the header has none), key, partition, size on disk, recorded compile
    seconds, hits in this process, whether it is loadable onto other devices, and the compiled memory recorded
    at compile time. Actions (each result is shown under the buttons):

    * **Verify**: :meth:`~xlakit.cache.CacheFolder.verify` opens every entry; bad ones are quarantined and
      listed with their reason (each is a ``corrupt`` event).
    * **Evict selected**: removes the selected entries from the store; each is an ``evict`` event in the
      folder's log.
    * **Explain selected**: compares each selected entry's recorded environment with the current one
      (jax/jaxlib versions and build, backend, devices, CPU, XLA flags): could it be loaded here, and if not,
      which fields differ (:func:`xlakit.view.cache.explain_entry`). This needs JAX: an ``ExecutableCache``
      over the folder is made for the click and closed after. To explain a *function* (would it hit, which
      key part differs), call :meth:`explain` with the function and example arguments.

    Args:
      cache: an :class:`~xlakit.ExecutableCache`, the :class:`~xlakit.TransparentCache`
        :func:`xlakit.enable_cache` returns, a :class:`~xlakit.cache.CacheFolder`, a cache folder path, or
        None for the enabled transparent cache. Default None.
      name_filter, partition, max_rows: initial values of those traits.
      layout: an ``ipywidgets.Layout`` for the box.

    Raises:
      ValueError: ``cache`` is None and no cache is enabled.
      TypeError: an unsupported ``cache`` or an unknown keyword argument.
    """

    _title = "xlakit cache browser"

    #: Case-insensitive substring of the entry name ("" = all; str, default "").
    name_filter = traitlets.Unicode("")
    #: Only this partition, or "" for all (str, default "").
    partition = traitlets.Unicode("")
    #: The selected entries as ``(partition, key)`` pairs (tuple, default empty).
    selected = traitlets.Tuple()
    #: Table rows shown at most (int, default 200 rows).
    max_rows = traitlets.Int(200)
    #: Fold the entries of programs called only from inside jax/flax/optax (as this process's events say)
    #: into one "library helpers" line under the table (bool, default True); the checkbox toggles it.
    fold_library = traitlets.Bool(True)

    @traitlets.validate("max_rows")
    def _check_max_rows(self, proposal: Any) -> int:
        from xlakit.widgets._base import checked_count

        return checked_count(proposal["value"], "max_rows", "entries listed")

    def __init__(self, cache: Any = None, *, name_filter: str = "", partition: str = "", max_rows: int = 200,
                 fold_library: bool = True, layout: widgets.Layout | None = None) -> None:
        for name, value in (("name_filter", name_filter), ("partition", partition)):
            if not isinstance(value, str):  # the text box refused 5 without naming the argument
                raise TypeError(f"{name} must be a str, got {type(value).__name__}")
        self._setup_view()
        #: the :class:`~xlakit.cache.CacheFolder` shown (``cache`` itself when it is one).
        self.cache = _folder.as_folder(cache, who="CacheBrowser")
        from xlakit.events import EventLog
        from xlakit.events import log as process_log

        # Whose programs the entries are: what the cache's own log (else the process-wide one) recorded.
        own = getattr(cache, "log", None)
        self._origin_log = own if isinstance(own, EventLog) else process_log()
        self.entries: Any = None  # every entry (DataFrame, with a signature column)
        self.frame: Any = None  # the filtered entries shown
        self.totals: Any = None  # per-partition totals
        #: the result of the last action: ("verify" | "evict" | "explain", value) or None.
        self.last_action: tuple[str, Any] | None = None

        self._name_box = widgets.Text(value=name_filter, description="name", placeholder="substring",
                                      layout=widgets.Layout(width="260px"))
        self._partition_menu = widgets.Dropdown(options=[("all partitions", "")], value="", description="partition",
                                                layout=widgets.Layout(width="auto", max_width="100%"))
        self._fold_box = widgets.Checkbox(value=fold_library, description="fold library helpers", indent=False,
                                          layout=widgets.Layout(width="200px"))
        self.library_html = widgets.HTML()
        self._selector = widgets.SelectMultiple(options=[], rows=8, description="select",
                                                layout=widgets.Layout(width="98%", min_width="0"))
        self._selector.add_class("xlakit-entry-select")
        self.verify_button = widgets.Button(description="Verify", icon="check",
                                            tooltip="open every entry; quarantine bad ones")
        self.evict_button = widgets.Button(description="Evict selected", icon="trash", button_style="danger")
        self.explain_button = widgets.Button(description="Explain selected", icon="question",
                                             tooltip="compare the selected entries' environment with this one")
        self.refresh_button = widgets.Button(description="Refresh", icon="refresh")
        for button, action in ((self.verify_button, self.verify), (self.evict_button, self.evict_selected),
                               (self.explain_button, self.explain_selected), (self.refresh_button, self.refresh)):
            button.on_click(self._guard(lambda _b, action=action: action(), button.description.lower()))
        self.totals_html = widgets.HTML()
        self.table_html = widgets.HTML()
        self.result = widgets.HTML()
        self.result.add_class("xlakit-cache-result")
        self.status = widgets.HTML()
        filters = widgets.HBox([self._name_box, self._partition_menu, self._fold_box],
                               layout=widgets.Layout(flex_flow="row wrap"))
        buttons = widgets.HBox([self.verify_button, self.evict_button, self.explain_button, self.refresh_button],
                               layout=widgets.Layout(flex_flow="row wrap"))
        self._owned = [self._name_box, self._partition_menu, self._selector, self.verify_button,
                       self.evict_button, self.explain_button, self.refresh_button, self.totals_html,
                       self.table_html, self.result, self.status, filters, buttons, self.error_area, self._style,
                       self._fold_box, self.library_html]
        super().__init__(children=[self._style, self.status, self.totals_html, filters, self._selector, buttons,
                                   self.error_area,
                                   self.result, self.table_html, self.library_html],
                         name_filter=name_filter, partition=partition, max_rows=max_rows, fold_library=fold_library,
                         layout=layout or widgets.Layout(width="100%"))
        self.add_class("xlakit-cache-browser")
        widgets.link((self._name_box, "value"), (self, "name_filter"))
        self.refresh()
        widgets.link((self._partition_menu, "value"), (self, "partition"))
        widgets.link((self._selector, "value"), (self, "selected"))
        widgets.link((self._fold_box, "value"), (self, "fold_library"))
        self.observe(self._guard(lambda _c: self._show(), "filter"), names=["name_filter", "partition", "max_rows",
                                                                             "fold_library"])

    # -- state ------------------------------------------------------------------------------------------
    @traitlets.validate("selected")
    def _check_selected(self, proposal: Any) -> tuple:
        value = tuple(tuple(v) for v in proposal["value"])
        for v in value:
            if len(v) != 2:
                raise traitlets.TraitError(f"selected entries are (partition, key) pairs, got {v!r}")
        return value

    def select(self, *keys: str) -> None:
        """Select entries by key (or key prefix) among those shown."""
        rows = _data.frame_records(self.frame)
        picked = [(r["partition"], r["key"]) for r in rows if any(r["key"].startswith(k) for k in keys)]
        missing = [k for k in keys if not any(key.startswith(k) for _, key in picked)]
        if missing:
            raise KeyError(f"no entry shown with key {missing}; filters: name={self.name_filter!r}, "
                           f"partition={self.partition!r}")
        self.selected = tuple(picked)

    def refresh(self) -> None:
        """Read the entries again and redraw."""
        with self._lock:
            self.entries = _folder.entries_frame(self.cache)
            if not self.entries.empty:
                self.entries["origin"] = _cache_view.entry_origins(self.entries, self._origin_log.events())
            self.totals = _data.partition_totals(self.entries)
            partitions = sorted(self.totals.index) if not self.totals.empty else []
            options = [("all partitions", ""), *((p, p) for p in partitions)]
            if self.partition and self.partition not in partitions:
                self.partition = ""
            self._partition_menu.options = options
            self._partition_menu.value = self.partition
            self._show()

    def _show(self) -> None:
        with self._lock:
            self.frame = _data.filter_entries(self.entries, self.name_filter, self.partition or None,
                                              fold_library=self.fold_library)
            shown = _data.filter_entries(self.entries, self.name_filter, self.partition or None)
            self.library_html.value = _cache_view.library_html(shown) if self.fold_library else ""
            rows = _data.frame_records(self.frame)
            options = [(_cache_view.entry_label(r), (r["partition"], r["key"])) for r in rows]
            keep = tuple(v for v in self.selected if v in {o[1] for o in options})
            self._selector.options = options
            self.selected = keep
            self._selector.value = keep
            self.table_html.value = _snapshots.entries_html(self.frame, self.max_rows)
            self.totals_html.value = _snapshots.partitions_html(self.totals)
            # One on-disk total: the sum of the entries' files, the same number the partition table adds up.
            total = _cache_view.disk_total(self.entries)
            cap_bytes = getattr(self.cache.store, "max_bytes", None)
            cap = f" (cap {fmt_bytes(cap_bytes)})" if cap_bytes else ""
            n = 0 if self.entries is None else len(self.entries)
            hidden = len(shown) - len(self.frame)
            folded = f" ({hidden} of library helpers folded, below)" if hidden else ""
            self.status.value = (f"<small class='xlakit-note'>{html_text(str(self.cache.store.root))}: {n} entries, "
                                 f"<span data-bytes='{total}'>{fmt_bytes(total)}</span> on disk{cap}; "
                                 f"{len(self.frame)} shown{folded}</small>")

    # -- actions ----------------------------------------------------------------------------------------
    def verify(self) -> list[tuple[Any, str | None]]:
        """:meth:`CacheFolder.verify` every entry, show the bad ones, refresh. Returns its result."""
        results = self.cache.verify()
        bad = [(info, reason) for info, reason in results if reason]
        rows = [{"name": i.name, "key": i.key, "partition": i.partition, "reason": r} for i, r in bad]
        table = _data.table_html(rows, [("name", "name"), ("key", "key"), ("partition", "partition"),
                                        ("reason", "reason")]) if rows else ""
        self.result.value = (f"<b>Verify</b>: {len(results)} entries checked, {len(bad)} bad"
                             f"{' (quarantined)' if bad else ''}.{table}")
        self.last_action = ("verify", results)
        self.refresh()
        return results

    def evict_selected(self) -> list[tuple[str, str]]:
        """Remove the selected entries from the store; each removal is an ``evict`` event. Returns the
        (partition, key) pairs removed."""
        if not self.selected:
            self.result.value = "<b>Evict</b>: nothing selected."
            self.last_action = ("evict", [])
            return []
        info = {(r["partition"], r["key"]): r for r in _data.frame_records(self.entries)}
        removed = []
        for partition, key in self.selected:
            row = info.get((partition, key), {})
            if _folder.evict(self.cache, partition, key, name=row.get("name"), size_bytes=row.get("size_bytes"),
                             reason="evicted by hand in CacheBrowser"):
                removed.append((partition, key))
        names = ", ".join(html_text(f"{info.get(pk, {}).get('name') or '?'} ({pk[1][:16]}…)") for pk in removed)
        self.result.value = f"<b>Evict</b>: removed {len(removed)} of {len(self.selected)} selected: {names}"
        self.last_action = ("evict", removed)
        self.selected = ()
        self.refresh()
        return removed

    def explain_selected(self) -> list[Any]:
        """Compare each selected entry's recorded environment with the current one; show and return the
        :class:`~xlakit.explain.Explanation` of each. Makes an ``ExecutableCache`` for this (JAX computes the
        environment) and closes it after, unless the browser shows one already."""
        if not self.selected:
            self.result.value = "<b>Explain</b>: nothing selected."
            self.last_action = ("explain", [])
            return []
        wanted = set(self.selected)
        infos = [i for i in self.cache.infos() if (i.partition, i.key) in wanted]
        with _folder.explainer(self.cache):
            env = _folder.current_environment()
        explanations = [_cache_view.explain_entry(i, env) for i in infos]
        self.result.value = "<b>Explain against the current environment</b>" + "".join(
            f"<div class='xlakit-explanation'>{e._repr_html_()}</div>" for e in explanations)
        self.last_action = ("explain", explanations)
        return explanations

    def explain(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        """:meth:`ExecutableCache.explain` for a function and example arguments; shows and returns it (an
        ``ExecutableCache`` over the folder is made for the call and closed after, unless the browser shows
        one already)."""
        with _folder.explainer(self.cache) as cache:
            explanation = cache.explain(fn, *args, **kwargs)
        self.result.value = f"<div class='xlakit-explanation'>{explanation._repr_html_()}</div>"
        self.last_action = ("explain", [explanation])
        return explanation

    # -- display ----------------------------------------------------------------------------------------
    def to_html(self, include_plotlyjs: bool | str = "once") -> str:
        """Static snapshot: per-partition totals and the (filtered) entries with exact sizes."""
        return _snapshots.cache_html(self.frame, _data.partition_totals(self.frame), max_rows=self.max_rows,
                                     folder=str(self.cache.store.root), status=self.result.value or None,
                                     library=self.library_html.value)

    def __repr__(self) -> str:
        n = 0 if self.frame is None else len(self.frame)
        return f"CacheBrowser({self.cache.store.root}: {n} entries shown, {len(self.selected)} selected)"
