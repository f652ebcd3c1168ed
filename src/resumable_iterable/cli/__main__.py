"""``python -m resumable_iterable.cli``: the same as the ``resumable-iterable`` console script."""

import sys

from . import main

sys.exit(main())
