"""Airflow plugins of the provider: the LogStore view in the Airflow UI."""
