"""The LogStore view in the Airflow UI: an Airflow plugin with a FastAPI app and a page in the UI's menu.

A thin shell over :mod:`airflow_logstore.health` (which reads the tables):

- ``GET /logstore/``: the page (``logstore_view.html``, which renders the JSON below in the browser);
- ``GET /logstore/api/tables``: every LogStore table of the catalog, as JSON;
- ``GET /logstore/api/tables/{namespace.table}``: one table.

Airflow does not authenticate a plugin's app by itself: every route depends on the auth manager's
``requires_access_view`` (``airflow.api_fastapi.core_api.security``, as the edge3 provider's UI routes
do), so a request without a valid token (the ``Authorization: Bearer`` header or the UI's session
cookie) gets 401 or 403 whenever Airflow requires a login, and a user needs the *cluster activity* view
(Viewer and above, in Airflow's roles). The page is linked from the UI's *Browse* menu
(``external_views``), shown inside the UI at ``/plugin/logstore``.

The catalog and Kafka settings come from the ``logstore_default`` and ``kafka_default`` connections (or
the embedded default without them), as for the operators; ``[logstore] view_logstore_conn_id`` and
``view_kafka_config_id`` in Airflow's configuration name others.

The app is built only in the API server (as edge3 does): Airflow loads plugins in every component,
and the others need neither FastAPI routes nor Airflow's API modules.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable
from importlib import resources
from typing import TYPE_CHECKING, Any

from airflow.plugins_manager import AirflowPlugin

if TYPE_CHECKING:
    from fastapi import FastAPI

    from airflow_logstore.health.probe import TableProbe
    from airflow_logstore.hooks.logstore import LogStoreHook

URL_PREFIX = "/logstore"
#: The Airflow view a user must be allowed to see (Viewer and above in the simple and FAB auth managers).
ACCESS_VIEW = "CLUSTER_ACTIVITY"
PAGE_FILE = "logstore_view.html"


def page_html() -> str:
    """The page: static HTML whose script fetches ``api/tables`` and renders it."""
    return resources.files(__package__ or "airflow_logstore.plugins").joinpath(PAGE_FILE).read_text()


def _conf(key: str, default: str) -> str:
    from airflow.configuration import conf

    return str(conf.get("logstore", key, fallback=default))


@functools.cache
def _hook() -> LogStoreHook:
    """The hook of the view's catalog and Kafka settings (the operators' connections by default): one per
    process, so that it says once, not at every request, that the embedded default applies (it reads
    the connections at each use)."""
    from airflow_logstore.hooks.logstore import LogStoreHook

    return LogStoreHook(
        _conf("view_logstore_conn_id", LogStoreHook.default_conn_name),
        _conf("view_kafka_config_id", "kafka_default"),
    )


def live_probes() -> list[TableProbe]:
    """A probe per LogStore table of the configured catalog."""
    from airflow_logstore.health.probe import catalog_probes

    hook = _hook()
    return list(catalog_probes(hook.catalog_spec(), hook.kafka_extra()))


def one_probe(name: str) -> TableProbe:
    """A probe of the table ``name`` (``namespace.table``) of the configured catalog."""
    from airflow_logstore.health.probe import LiveProbe

    return LiveProbe(_hook().table(name))


def create_app(
    probes: Callable[[], Iterable[TableProbe]] = live_probes,
    probe: Callable[[str], TableProbe] = one_probe,
) -> FastAPI:
    """The view's FastAPI app (mounted by Airflow at :data:`URL_PREFIX`).

    :param probes: returns the probes of every table (tests pass fakes); ``probe`` one table's by name.
    """
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import requires_access_view
    from fastapi import Depends, FastAPI, HTTPException, Query, Request
    from fastapi.exception_handlers import http_exception_handler
    from fastapi.responses import HTMLResponse, Response

    from airflow_logstore.exceptions import IdentifierError, TableNotFoundError
    from airflow_logstore.health import catalog_health, describe_error, table_health
    from airflow_logstore.health.view import DEFAULT_HOURS, MAX_HOURS
    from airflow_logstore.table.catalog import TableName

    authorized = [Depends(requires_access_view(access_view=AccessView[ACCESS_VIEW]))]
    hours_query = Query(DEFAULT_HOURS, gt=0, le=MAX_HOURS, description="window of the visibility-lag chart")
    # no routes of FastAPI's own (its OpenAPI schema and docs pages would need no login): the schema
    # is served below, behind the same dependency as every route
    app = FastAPI(
        title="LogStore view",
        description="The health of LogStore tables: snapshots, log lag, undecided batches, "
        "reconciliation, retention gaps, compaction and visibility lag.",
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )

    def schema(request: Request) -> dict[str, Any]:
        """The JSON API's OpenAPI schema, its paths under the app's mount (``/logstore``)."""
        from fastapi.openapi.utils import get_openapi

        root = str(request.scope.get("root_path", "")).rstrip("/")
        return get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
            servers=[{"url": root}] if root else None,
        )

    schema.__annotations__["request"] = Request  # the class itself: FastAPI resolves no local name
    app.get("/openapi.json", dependencies=authorized, include_in_schema=False)(schema)

    @app.get("/", response_class=HTMLResponse, dependencies=authorized, include_in_schema=False)
    def page() -> HTMLResponse:
        return HTMLResponse(page_html())

    @app.get("/api/tables", dependencies=authorized)
    def tables(hours: float = hours_query) -> dict[str, Any]:
        """Every LogStore table of the catalog."""
        try:
            found = probes()
        except Exception as exc:  # the catalog itself: nothing to show table by table
            raise HTTPException(
                503, f"the LogStore catalog could not be read: {describe_error(exc)}"
            ) from exc
        return catalog_health(found, hours=hours)

    @app.get("/api/tables/{name}", dependencies=authorized)
    def table(name: str, hours: float = hours_query) -> dict[str, Any]:
        """One table, by ``namespace.table``."""
        try:
            TableName.parse(name)
        except IdentifierError as exc:
            raise HTTPException(400, str(exc)) from exc
        health = table_health(probe(name), hours=hours)
        if str(health["errors"].get("table", "")).startswith(TableNotFoundError.__name__):
            raise HTTPException(404, health["errors"]["table"])
        return health

    @app.exception_handler(HTTPException)
    async def login_page(request: Request, exc: HTTPException) -> Response:
        """The page's 401 and 403 say how to log in; the API's stay JSON."""
        is_page = request.url.path.rstrip("/") == str(request.scope.get("root_path", "")).rstrip("/")
        if not is_page or exc.status_code not in (401, 403):
            return await http_exception_handler(request, exc)
        return HTMLResponse(_login_html(str(request.url), exc.status_code, str(exc.detail)), exc.status_code)

    return app


def _login_html(page_url: str, status: int, detail: str) -> str:
    import html

    from airflow.api_fastapi.app import get_auth_manager

    try:
        login = get_auth_manager().get_url_login(next_url=page_url)
    except Exception:  # an auth manager without a login page: Airflow's own UI knows the way
        login = "/"
    verdict = "Log in to Airflow" if status == 401 else "Your Airflow user may not see this view"
    return (
        "<!doctype html><html><head><title>LogStore</title></head><body>"
        f"<h1>LogStore</h1><p id='auth-error' data-status='{status}'>{html.escape(verdict)} "
        f"({html.escape(detail)}).</p><p><a href='{html.escape(login, quote=True)}'>Log in</a></p>"
        "</body></html>"
    )


def base_path(path: str) -> str:
    """``path`` under the path of Airflow's ``[api] base_url`` (a UI served under a prefix)."""
    from urllib.parse import urlparse

    from airflow.configuration import conf

    base_url = str(conf.get("api", "base_url", fallback="/") or "/")
    prefix = urlparse(base_url).path if base_url.startswith(("http://", "https://")) else base_url
    return prefix.rstrip("/") + path


def _on_api_server() -> bool:
    """Whether this process is Airflow's API server (``airflow api-server``)."""
    return len(sys.argv) > 1 and sys.argv[1] == "api-server"


class LogStoreViewPlugin(AirflowPlugin):
    """The LogStore view: its FastAPI app and its entry in the UI's *Browse* menu."""

    name = "logstore"
    fastapi_apps = (
        [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "LogStore view"}] if _on_api_server() else []
    )
    external_views = [
        {
            "name": "LogStore",
            "href": base_path(f"{URL_PREFIX}/"),
            "destination": "nav",
            "category": "browse",
            "url_route": "logstore",
        }
    ]
