import sys

from launcher.autoscaler.daemon import main

sys.exit(main())
