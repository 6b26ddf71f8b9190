"""``python -m diffugrpo_plugin.cli``: the ``diffugrpo`` command without its console script."""

import sys

from diffugrpo_plugin.cli import main

sys.exit(main())
