"""The LogStore view's plugin: registered as Airflow providers register theirs, its routes behind Airflow's
own auth manager (the simple auth manager, in-process: real tokens, real role checks), its JSON."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from airflow_logstore import get_provider_info
from airflow_logstore.exceptions import CatalogUnavailableError, TableNotFoundError
from airflow_logstore.plugins import logstore_view
from airflow_logstore.plugins.logstore_view import LogStoreViewPlugin, create_app
from tests.unit.health.test_table_health import FakeProbe, scenario

PLUGIN_CLASS = "airflow_logstore.plugins.logstore_view.LogStoreViewPlugin"
SIMPLE_AUTH_MANAGER = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"


def test_the_provider_registers_the_plugin_as_airflow_providers_do() -> None:
    """Listed in ``get_provider_info()`` and in the ``airflow.plugins`` entry points (Airflow loads the
    latter; the former only when providers are not discovered lazily), as the Kafka and edge3 providers."""
    (listed,) = get_provider_info()["plugins"]
    assert listed == {"name": "logstore", "plugin-class": PLUGIN_CLASS}
    module, _, name = listed["plugin-class"].rpartition(".")
    assert getattr(importlib.import_module(module), name) is LogStoreViewPlugin
    (entry,) = [ep for ep in entry_points(group="airflow.plugins") if ep.value.startswith("airflow_logstore")]
    assert entry.load() is LogStoreViewPlugin and entry.name == LogStoreViewPlugin.name


def test_airflow_loads_the_view_once_with_its_menu_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow import plugins_manager, settings

    for lazy in (True, False):
        monkeypatch.setattr(settings, "LAZY_LOAD_PROVIDERS", lazy)
        plugins, errors = plugins_manager._get_plugins.__wrapped__()
        ours = [p for p in plugins if p.name == "logstore"]
        assert len(ours) == 1 and isinstance(ours[0], LogStoreViewPlugin)
        # listed twice (entry point and provider info), Airflow keeps the first and says it skipped the
        # other, exactly as for its own Kafka provider's plugin (since 3.3 also among the import errors)
        assert errors.get("logstore") in (
            None,
            *([] if lazy else ["Plugin 'logstore' already registered, skipping"]),
        )
    (view,) = LogStoreViewPlugin.external_views
    assert view == {
        "name": "LogStore",
        "href": "/logstore/",
        "destination": "nav",
        "category": "browse",
        "url_route": "logstore",
    }


def test_the_app_is_built_only_in_the_api_server(monkeypatch: pytest.MonkeyPatch) -> None:
    assert LogStoreViewPlugin.fastapi_apps == []  # pytest is no API server
    monkeypatch.setattr(sys, "argv", ["airflow", "api-server", "--port", "8080"])
    assert logstore_view._on_api_server()
    monkeypatch.setattr(sys, "argv", ["airflow", "scheduler"])
    assert not logstore_view._on_api_server()


def test_the_menu_entry_follows_a_base_url_with_a_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com/team-a/")
    assert logstore_view.base_path("/logstore/") == "/team-a/logstore/"
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://127.0.0.1:8080")
    assert logstore_view.base_path("/logstore/") == "/logstore/"


# -- behind Airflow's auth manager -----------------------------------------------------------------------


@pytest.fixture
def auth(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    """Airflow's simple auth manager with a login required: a viewer, and a user without a role."""
    from airflow.api_fastapi.app import create_auth_manager, purge_cached_app

    settings = {
        "CORE__AUTH_MANAGER": SIMPLE_AUTH_MANAGER,
        "CORE__SIMPLE_AUTH_MANAGER_USERS": "viewer:viewer,nobody:",
        "CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(tmp_path / "passwords.json"),
        "API_AUTH__JWT_SECRET": "unit-test-secret-" * 4,
    }
    for key, value in settings.items():
        monkeypatch.setenv(f"AIRFLOW__{key}", value)
    try:  # a token's revocation is looked up in Airflow's metadata DB, which unit tests do not have
        from airflow.models.revoked_token import RevokedToken

        monkeypatch.setattr(RevokedToken, "is_revoked", classmethod(lambda cls, jti, session=None: False))
    except ImportError:
        pass
    purge_cached_app()
    manager = create_auth_manager()
    manager.init()
    yield manager
    purge_cached_app()


def token(manager: Any, name: str, role: str) -> str:
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return str(manager.generate_jwt(SimpleAuthManagerUser(username=name, role=role)))


def client(**probes: Any) -> Any:
    from fastapi.testclient import TestClient

    return TestClient(create_app(**probes))


def fake_probes() -> dict[str, Any]:
    def one(name: str) -> FakeProbe:
        if name == "ns.orders":
            return scenario().probe
        return FakeProbe(name, [], failures={"facts": TableNotFoundError(f"table '{name}' does not exist")})

    return {"probes": lambda: [scenario().probe], "probe": one}


@pytest.mark.parametrize("path", ["/api/tables", "/api/tables/ns.orders", "/"])
def test_an_anonymous_request_is_refused_when_airflow_requires_a_login(auth: Any, path: str) -> None:
    view = client(**fake_probes())
    assert view.get(path).status_code == 401
    assert view.get(path, headers={"Authorization": "Bearer not-a-token"}).status_code == 403
    nobody = token(auth, "nobody", "")  # a real token of a user without the view's permission
    assert view.get(path, headers={"Authorization": f"Bearer {nobody}"}).status_code == 403
    viewer = token(auth, "viewer", "viewer")
    assert view.get(path, headers={"Authorization": f"Bearer {viewer}"}).status_code == 200


def test_every_route_of_the_app_needs_a_login(auth: Any) -> None:
    """Every route the app serves, FastAPI's own included: none answers an anonymous request (the
    OpenAPI schema and docs pages FastAPI adds by default would)."""
    from starlette.routing import Route

    view = client(**fake_probes())
    paths = sorted(r.path for r in view.app.routes if isinstance(r, Route))
    assert {"/", "/api/tables", "/api/tables/{name}", "/openapi.json"} <= set(paths), paths
    viewer = {"Authorization": f"Bearer {token(auth, 'viewer', 'viewer')}"}
    for path in [p.replace("{name}", "ns.orders") for p in paths]:
        assert view.get(path).status_code == 401, path
        assert view.get(path, headers=viewer).status_code == 200, path
    for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):  # not served at all
        assert view.get(path, headers=viewer).status_code == 404, path
    schema = view.get("/openapi.json", headers=viewer).json()
    assert set(schema["paths"]) == {"/api/tables", "/api/tables/{name}"}
    assert schema.get("servers") is None  # served at the root here; under Airflow, at its mount:
    from fastapi.testclient import TestClient

    under_airflow = TestClient(view.app, root_path="/logstore")
    servers = under_airflow.get("/openapi.json", headers=viewer).json()["servers"]
    assert servers == [{"url": "/logstore"}]


def test_the_ui_session_cookie_is_a_credential_and_the_page_says_how_to_log_in(auth: Any) -> None:
    view = client(**fake_probes())
    refused = view.get("/")
    assert refused.status_code == 401 and refused.headers["content-type"].startswith("text/html")
    assert "id='auth-error' data-status='401'" in refused.text
    assert "href='/auth/login" in refused.text  # with ?next=<this page> where the auth manager takes it
    assert view.get("/api/tables").json() == {"detail": "Not authenticated"}  # the API's stay JSON
    view.cookies.set("_token", token(auth, "viewer", "viewer"))
    page = view.get("/")
    assert page.status_code == 200 and "fetch(`api/tables?hours=${hours}`" in page.text
    assert view.get("/api/tables").status_code == 200


def test_the_json_is_the_health_of_every_table(auth: Any) -> None:
    view = client(**fake_probes())
    headers = {"Authorization": f"Bearer {token(auth, 'viewer', 'viewer')}"}
    page = view.get("/api/tables", params={"hours": 2}, headers=headers).json()
    (table,) = page["tables"]
    assert table["table"] == "ns.orders" and table["lag"]["hours"] == 2.0
    assert [(a["writer_id"], a["batch_id"]) for a in table["batches"]["in_flight"]] == [("stream", 7)]
    assert table["reconcile"]["last_run"]["reversed"] == 4
    one = view.get("/api/tables/ns.orders", headers=headers).json()
    assert one["batches"] == table["batches"]
    assert view.get("/api/tables", params={"hours": 0}, headers=headers).status_code == 422
    assert view.get("/api/tables", params={"hours": 25}, headers=headers).status_code == 422
    bad = view.get("/api/tables/no;such.thing.here", headers=headers)
    assert bad.status_code == 400 and "namespace.table" in bad.json()["detail"]
    gone = view.get("/api/tables/ns.gone", headers=headers)
    assert gone.status_code == 404 and gone.json()["detail"].startswith("TableNotFoundError:")


def test_a_catalog_that_cannot_be_read_is_a_503_naming_it(auth: Any) -> None:
    def broken() -> list[Any]:
        raise CatalogUnavailableError("catalog 'logstore' (sql sqlite:////x.db) could not be reached")

    view = client(probes=broken)
    answer = view.get("/api/tables", headers={"Authorization": f"Bearer {token(auth, 'viewer', 'viewer')}"})
    assert answer.status_code == 503
    assert answer.json()["detail"] == (
        "the LogStore catalog could not be read: CatalogUnavailableError: catalog 'logstore' "
        "(sql sqlite:////x.db) could not be reached"
    )


def test_the_page_is_shipped_with_the_package() -> None:
    page = logstore_view.page_html()
    assert '<table id="tables">' in page and "lagChart" in page
