"""``python -m xlakit.cli``: the same as the ``xlakit`` console script."""

from xlakit.cli import main

raise SystemExit(main())
