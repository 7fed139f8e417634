"""``python -m dsh`` is the ``dsh`` command."""

import sys

from dsh.cli import main

sys.exit(main())
