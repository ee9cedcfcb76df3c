import sys

from dlbench_numpy_example.runner import main

sys.exit(main())
