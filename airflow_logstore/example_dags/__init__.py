"""The example DAGs, shipped with the package: ``logstore dags copy DEST`` puts them in a DAGs folder.

In a checkout these are links to the repository's ``dags/`` folder (one copy of each DAG); the wheel
carries the files themselves, with the demo's input files in ``data/``.
"""
