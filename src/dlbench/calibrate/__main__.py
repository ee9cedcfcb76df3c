import sys

from dlbench.calibrate.runner import main

sys.exit(main())
