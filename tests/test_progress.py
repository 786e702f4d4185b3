"""The load progress bar where stderr is a log file or a pipe, not a terminal."""

from __future__ import annotations

import io

from xlakit.bundle import progress


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


def test_a_discarded_bar_writes_nothing_more(monkeypatch):
    """A load that raises discards its bar: the modules it cancels afterwards are not drawn as failures."""
    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    bar = progress.progress_bar(3, "cnn")
    bar.update(1)
    bar.discard()
    _drive(bar)
    assert log.getvalue() == ""


def _on_terminal(monkeypatch, columns: int) -> bytes:
    """What a bar driven to the end writes to a real pseudo-terminal of ``columns`` x 24 (0: one that reports
    no size, as `script` without one does)."""
    import fcntl
    import os
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    rows = 24 if columns else 0
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    text = b""
    with os.fdopen(slave, "w") as terminal:
        monkeypatch.setattr("sys.stderr", terminal)
        _drive(progress.progress_bar(3, "cnn"))
        terminal.flush()
        os.set_blocking(master, False)
        try:  # read while the terminal is open: closing it first can drop what it holds
            while chunk := os.read(master, 65536):
                text += chunk
        except BlockingIOError:
            pass
    os.close(master)
    return text


def test_a_terminal_still_gets_tqdms_bar(monkeypatch):
    text = _on_terminal(monkeypatch, 100)
    assert b"\r" in text and b"3/3" in text and b"100%" in text and b"3 hit" in text, text


def test_a_terminal_that_reports_no_columns_gets_the_one_line(monkeypatch):
    """Fault: under `script` without a size the terminal reports 0 columns, and tqdm's bar sized to it drew
    nothing at all, not even the final count."""
    text = _on_terminal(monkeypatch, 0)
    assert b"cnn: 3/3 programs (3 hit, 0 compiled, 0 failed) in " in text and b"%|" not in text, text
