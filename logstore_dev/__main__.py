"""``python -m logstore_dev``: the development command line (``./dev services|airflow|demo``)."""

import sys

from logstore_dev.cli import main

sys.exit(main())
