import sys

from dlbench.mxnet.runner import main

sys.exit(main())
