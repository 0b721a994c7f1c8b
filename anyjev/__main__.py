import sys

from anyjev.cli import main

sys.exit(main())
