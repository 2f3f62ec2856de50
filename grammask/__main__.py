"""``python -m grammask`` is the ``grammask`` command."""

import sys

from grammask.cli import main

sys.exit(main())
