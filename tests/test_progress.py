"""The load progress bar where stderr is a log file or a pipe, not a terminal."""

from __future__ import annotations

import io

from xlakit.bundle import progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _drive(bar) -> None:
    for i in range(3):
        bar.update(1)
        bar.set_postfix_str(f"{i + 1} hit, 0 compiled, 0 failed")
    bar.close()
    bar.close()  # load_bundle's last update closes it; a second close writes nothing more


def test_a_non_terminal_stderr_gets_one_line_not_redraws_joined_by_carriage_returns(monkeypatch):
    """Fault: a bundle loaded with stderr sent to a CI log wrote tqdm's every redraw there, joined by '\\r'."""
    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    _drive(progress.progress_bar(3, "cnn\x1b[2J"))
    text = log.getvalue()
    assert "\r" not in text and "\x1b" not in text, text
    assert text.count("\n") == 1 and text.startswith("cnn"), text
    assert "3/3 programs (3 hit, 0 compiled, 0 failed) in " in text and text.endswith(" s\n"), text


def test_a_terminal_still_gets_tqdms_bar(monkeypatch):
    tty = _Terminal()
    monkeypatch.setattr("sys.stderr", tty)
    _drive(progress.progress_bar(3, "cnn"))
    text = tty.getvalue()
    assert "\r" in text and "3/3" in text and "100%" in text, text
