"""The provider registers itself and everything it lists imports."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

import airflow_logstore
from airflow_logstore import get_provider_info


def test_entry_point_is_registered() -> None:
    found = [
        ep for ep in entry_points(group="apache_airflow_provider") if ep.value.startswith("airflow_logstore")
    ]
    assert len(found) == 1
    assert found[0].load() is get_provider_info


def test_provider_info_lists_importable_modules() -> None:
    info = get_provider_info()
    assert info["package-name"] == "airflow-logstore"
    assert info["versions"] == [airflow_logstore.__version__]
    for section in ("hooks", "operators", "sensors", "triggers"):
        for entry in info[section]:
            for module in entry["python-modules"]:
                importlib.import_module(module)
    (connection,) = info["connection-types"]
    module, _, name = connection["hook-class-name"].rpartition(".")
    hook = getattr(importlib.import_module(module), name)
    assert hook.conn_type == connection["connection-type"] == "logstore"


def test_airflow_sees_the_provider() -> None:
    from airflow.providers_manager import ProvidersManager

    assert "airflow-logstore" in ProvidersManager().providers
    hooks = ProvidersManager().hooks
    assert hooks["logstore"] is not None and hooks["logstore"].hook_class_name.endswith("LogStoreHook")
