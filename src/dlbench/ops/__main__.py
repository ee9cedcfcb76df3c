import sys

from dlbench.ops.cli import main

sys.exit(main())
