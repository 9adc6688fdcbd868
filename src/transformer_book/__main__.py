import sys

from .translate import main

sys.exit(main())
