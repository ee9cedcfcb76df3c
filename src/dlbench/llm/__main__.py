import sys

from dlbench.llm.runner import main

sys.exit(main())
