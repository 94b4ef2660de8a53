"""``python -m kvstore``: the same commands as the ``kvstore`` script."""

import sys

from kvstore.cli import main

sys.exit(main())
