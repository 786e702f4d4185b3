"""The CLI called in-process the way a test reads it: ``run(capsys, "cache", "ls", ...)`` -> ``(exit code, stdout,
stderr)``; ``run_json`` adds ``--json`` and parses stdout. One definition for every CLI test file."""

from __future__ import annotations

import json

from xlakit.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    code, out, _err = run(capsys, *argv, "--json")
    return code, json.loads(out)
