"""Iceberg's REST catalog server for the cluster profile, as a local Java process without Docker.

The server is Iceberg's own test fixture, ``org.apache.iceberg.rest.RESTCatalogServer`` (the
``iceberg-open-api`` test-fixtures jar and ``iceberg-core``'s test jar, 1.11.0: see
``versions.REST_CATALOG_ARTIFACTS``), backed by a JDBC catalog in SQLite (``<state_dir>/catalog.db``)
with ``S3FileIO`` on the S3-compatible store (moto, path-style). It is configured by ``CATALOG_*``
environment variables (``CATALOG_IO__IMPL`` -> ``io-impl``, ``CATALOG_REST_PORT`` -> ``rest.port``).

Listen address: ``RESTCatalogServer.start`` builds Jetty's ``new Server(port)``, whose connector binds
*all interfaces* (and sets SO_REUSEPORT); it has no setting, system property or variable for the host.
So it is not run as is: a 40-line launcher in the same package (:data:`LAUNCHER_SOURCE`, compiled once
with the JDK's ``javac`` into the jar cache) does what ``start`` does — the same backend catalog, the
same ``RESTServerCatalogAdapter`` and ``RESTCatalogServlet``, gzip — on a ``ServerConnector`` bound to
127.0.0.1 only, without SO_REUSEPORT. It also needs no Hadoop (``start`` passes a Hadoop
``Configuration`` that a JDBC catalog with S3FileIO never uses). Every client uses 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from airflow_logstore import versions
from airflow_logstore.jars import fetch_jars
from airflow_logstore.javac import compiled_classes
from airflow_logstore.settings import LocalSettings
from logstore_dev.services import _process
from logstore_dev.services._process import PortService, port_open

LAUNCHER_CLASS = "org.apache.iceberg.rest.LogstoreLoopbackRESTCatalogServer"
LAUNCHER_SOURCE = """\
package org.apache.iceberg.rest;

import java.util.Map;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.apache.iceberg.relocated.com.google.common.collect.Maps;
import org.apache.iceberg.util.PropertyUtil;
import org.eclipse.jetty.compression.gzip.GzipCompression;
import org.eclipse.jetty.compression.server.CompressionHandler;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

/** RESTCatalogServer.start(true) with its connector bound to one host (logstore.rest.host). */
public final class LogstoreLoopbackRESTCatalogServer {
  private LogstoreLoopbackRESTCatalogServer() {}

  public static void main(String[] args) throws Exception {
    Map<String, String> properties = Maps.newHashMap(RCKUtils.environmentCatalogConfig());
    properties.putIfAbsent(CatalogProperties.CATALOG_IMPL, JdbcCatalog.class.getName());
    properties.putIfAbsent("jdbc.schema-version", "V1");
    if (!properties.containsKey(CatalogProperties.URI)
        || !properties.containsKey(CatalogProperties.WAREHOUSE_LOCATION)) {
      throw new IllegalArgumentException("CATALOG_URI and CATALOG_WAREHOUSE must be set");
    }
    String name =
        PropertyUtil.propertyAsString(properties, RESTCatalogServer.CATALOG_NAME, "rest_backend");
    Catalog catalog = CatalogUtil.buildIcebergCatalog(name, properties, null);
    RESTCatalogServer.CatalogContext context =
        new RESTCatalogServer.CatalogContext(catalog, properties);

    ServletContextHandler handler = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    handler.addServlet(
        new ServletHolder(new RESTCatalogServlet(new RESTServerCatalogAdapter(context))), "/*");
    CompressionHandler compression = new CompressionHandler();
    compression.putCompression(new GzipCompression());
    handler.insertHandler(compression);

    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost(System.getProperty("logstore.rest.host", "127.0.0.1"));
    connector.setPort(PropertyUtil.propertyAsInt(properties, RESTCatalogServer.REST_PORT, 8181));
    server.addConnector(connector);
    server.setHandler(handler);
    server.start();
    server.join();
  }
}
"""


class LocalRestCatalog(PortService):
    """Iceberg's REST catalog server on ``127.0.0.1:port``, tables in ``warehouse`` on ``s3_endpoint``.

    Promises: :meth:`up` leaves ``GET /v1/config`` answering, or raises :class:`ServiceError` with the
    log's last lines; it is idempotent. The catalog (namespaces, table pointers) persists in
    ``<state_dir>/catalog.db``; table files are in the object store. :meth:`down` stops it by PID.
    """

    kind, title, stem = "catalog", "Iceberg's REST catalog server", "rest-catalog"
    up_timeout, stop_timeout = 90.0, 20.0

    def __init__(
        self,
        settings: LocalSettings | None = None,
        *,
        port: int,
        state_dir: Path,
        warehouse: str = "s3://warehouse/",
        s3_endpoint: str,
        access_key: str,
        secret_key: str,
        region: str = "us-east-1",
        heap: str = "256m",
    ) -> None:
        super().__init__(settings, port=port, state_dir=state_dir)
        self.warehouse = warehouse
        self.s3_endpoint = s3_endpoint
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = region
        self.heap = heap
        self.database = self.state_dir / "catalog.db"

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client_properties(self) -> dict[str, str]:
        """pyiceberg's ``load_catalog`` properties: this catalog and S3 FileIO on the same store."""
        return {
            "type": "rest",
            "uri": self.uri,
            "warehouse": self.warehouse,
            "s3.endpoint": self.s3_endpoint,
            "s3.access-key-id": self.access_key,
            "s3.secret-access-key": self.secret_key,
            "s3.region": self.region,
            "s3.path-style-access": "true",
        }

    # -- lifecycle -----------------------------------------------------------------------------------

    @property
    def where(self) -> str:
        return self.uri

    def _details(self) -> dict[str, Any]:
        return {"uri": self.uri, "warehouse": self.warehouse, "database": str(self.database)}

    def _is_ours(self, pid: int) -> bool:
        return f"-Dlogstore.state={self.state_dir}" in _process.cmdline(pid)

    def _start(self) -> None:
        _process.ensure_port_free(self.port, self.process.name)  # before a download or a compilation
        jars = fetch_jars(
            "rest-catalog", versions.REST_CATALOG_ARTIFACTS, transitive=True, settings=self.settings
        )
        launcher = compile_launcher(jars, self.settings)
        command = [
            _process.java(),
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-Djava.awt.headless=true",
            _process.java_tmpdir(self.state_dir / "tmp"),
            "-Dlogstore.rest.host=127.0.0.1",
            f"-Dlogstore.state={self.state_dir}",
            "-cp",
            f"{launcher}:{jars}/*",
            LAUNCHER_CLASS,
        ]
        self.process.launch(command, env=self._env(), ports=[self.port])

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CATALOG_", "AWS_"))}
        env.update(
            CATALOG_URI=f"jdbc:sqlite:file:{self.database}",
            CATALOG_WAREHOUSE=self.warehouse,
            CATALOG_REST_PORT=str(self.port),
            CATALOG_IO__IMPL="org.apache.iceberg.aws.s3.S3FileIO",
            CATALOG_S3_ENDPOINT=self.s3_endpoint,
            CATALOG_S3_PATH__STYLE__ACCESS="true",
            CATALOG_CLIENT_REGION=self.region,
            AWS_ACCESS_KEY_ID=self.access_key,
            AWS_SECRET_ACCESS_KEY=self.secret_key,
            AWS_REGION=self.region,
        )
        return env

    def _ready(self) -> bool:
        """``GET /v1/config`` answers."""
        if not port_open(self.port):
            return False
        try:
            with urllib.request.urlopen(f"{self.uri}/v1/config", timeout=3) as response:
                json.loads(response.read())
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False


def compile_launcher(jars: Path, settings: LocalSettings) -> Path:
    """The launcher's class folder, compiled once per source and jar set with the JDK's ``javac``."""
    return compiled_classes(
        "rest-catalog-launcher",
        LAUNCHER_CLASS,
        LAUNCHER_SOURCE,
        f"{jars}/*",
        settings,
        purpose="the REST catalog's loopback launcher",
    )
