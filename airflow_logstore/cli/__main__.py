"""``python -m airflow_logstore.cli``: the ``logstore`` command."""

import sys

from airflow_logstore.cli.app import main

sys.exit(main())
