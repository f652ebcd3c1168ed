"""``python -m resumable_iterable``: the same as the ``resumable-iterable`` console script (and
``python -m resumable_iterable.cli``)."""

import sys

from .cli import main

sys.exit(main())
