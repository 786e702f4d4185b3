"""``python -m xlakit``: the ``xlakit`` command line (the same as the console script and ``python -m xlakit.cli``)."""

from xlakit.cli import main

raise SystemExit(main())
