import sys

from dlbench.pytorch.runner import main

sys.exit(main())
