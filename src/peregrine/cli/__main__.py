"""``python -m peregrine.cli``: the same as the ``peregrine`` console script."""

from peregrine.cli import main

raise SystemExit(main())
