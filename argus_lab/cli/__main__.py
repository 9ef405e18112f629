"""``python -m argus_lab.cli``: the ``argus`` command."""

import sys

from argus_lab.cli import main

sys.exit(main())
