"""``python -m threadspindle.effects.mcp_manager``: the same as ``spindle mcp``."""

import sys

from .server import main

sys.exit(main())
