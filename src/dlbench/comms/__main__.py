import sys

from dlbench.comms.runner import main

sys.exit(main())
