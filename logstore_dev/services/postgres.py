"""PostgreSQL for the cluster profile (Airflow's metadata database), as a local process without Docker.

:class:`LocalPostgres` runs the machine's PostgreSQL server (Debian's ``postgresql`` package; missing,
``scripts/install-postgres`` installs it when run as root). The cluster lives in ``<state_dir>/data``,
listens on 127.0.0.1 only (TCP, password auth) and on a Unix socket inside ``<state_dir>/run`` (mode
0700, trust: only the server's OS user and root reach it, used to create the role and database).
PostgreSQL refuses to run as root: as root, ``initdb`` and ``postgres`` run as the ``postgres`` OS user,
which then owns ``state_dir`` (and folders above it that nobody else may enter get a traverse-only
bit, ``o+x``, so that user can reach it).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import stat
import subprocess
from pathlib import Path
from typing import Any

from airflow_logstore.exceptions import ServiceError
from airflow_logstore.settings import SOURCE_ROOT, LocalSettings
from logstore_dev.services import _process
from logstore_dev.services._process import PortService, port_open

SUPERUSER = "postgres"
SERVER_USER = "postgres"  # the OS user the server runs as when we are root
INSTALL_SCRIPT = SOURCE_ROOT / "scripts" / "install-postgres"
_SOCKET_PATH_MAX = 107  # sun_path


class LocalPostgres(PortService):
    """A real PostgreSQL server on ``127.0.0.1:port`` with ``state_dir`` as its home.

    Promises: :meth:`up` leaves the server accepting password logins of ``user`` to ``database``
    (created on first start; the password is reset to ``password`` on every start), or raises
    :class:`ServiceError` naming what went wrong with the log's last lines; it is idempotent.
    :meth:`down` stops it by PID (fast shutdown of its process group); data stays in ``state_dir``.
    """

    kind, title, stem = "postgres", "PostgreSQL", "postgres"
    stop_signal = signal.SIGINT  # a fast shutdown

    def __init__(
        self,
        settings: LocalSettings | None = None,
        *,
        port: int,
        state_dir: Path,
        database: str = "airflow",
        user: str = "airflow",
        password: str,
    ) -> None:
        super().__init__(settings, port=port, state_dir=state_dir)
        self.database = database
        self.user = user
        self.password = password
        self.data_dir = self.state_dir / "data"
        self.socket_dir = self.state_dir / "run"

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of ``database`` (psycopg2 driver)."""
        return f"postgresql+psycopg2://{self.user}:{self.password}@127.0.0.1:{self.port}/{self.database}"

    # -- lifecycle -----------------------------------------------------------------------------------

    def _details(self) -> dict[str, Any]:
        return {"url": self.url.replace(f":{self.password}@", ":***@"), "data_dir": str(self.data_dir)}

    def _is_ours(self, pid: int) -> bool:
        return str(self.data_dir) in _process.cmdline(pid)

    # -- starting ------------------------------------------------------------------------------------

    def _start(self) -> None:
        _process.ensure_port_free(self.port, self.process.name)
        bindir = server_bindir()
        self._prepare_dirs()
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb(bindir)
        self.process.launch(
            [
                str(bindir / "postgres"),
                "-D",
                str(self.data_dir),
                "-p",
                str(self.port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                f"unix_socket_directories={self.socket_dir}",
                "-c",
                "unix_socket_permissions=0700",
                "-c",
                "max_connections=100",
            ],
            env=self._env(),
            user=self._server_user(),
        )

    def _server_user(self) -> str | None:
        return SERVER_USER if os.geteuid() == 0 else None

    def _env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            _process.STATE_ENV: str(self.state_dir),
        }

    def _prepare_dirs(self) -> None:
        socket_path = self.socket_dir / f".s.PGSQL.{self.port}"
        if len(str(socket_path)) > _SOCKET_PATH_MAX:
            raise ServiceError(
                f"PostgreSQL's socket path {socket_path} is longer than {_SOCKET_PATH_MAX} characters; "
                "use a shorter state folder (LOGSTORE_HOME)"
            )
        for folder in (self.state_dir, self.socket_dir):
            folder.mkdir(parents=True, exist_ok=True)
        user = self._server_user()
        if user is not None:
            _hand_over(self.state_dir, user)
        self.log_file.touch()
        if user is not None:
            shutil.chown(self.log_file, user, user)

    def _initdb(self, bindir: Path) -> None:
        result = subprocess.run(
            [
                str(bindir / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                SUPERUSER,
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
            ],
            capture_output=True,
            text=True,
            check=False,
            cwd=self.state_dir,
            env=self._env(),
            **_process.as_user(self._server_user()),
        )
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).splitlines()[-15:])
            raise ServiceError(f"initdb of {self.data_dir} failed with {result.returncode}:\n{tail}")

    # -- readiness and the role ----------------------------------------------------------------------

    def _superuser_connection(self) -> Any:
        import psycopg2

        return psycopg2.connect(
            host=str(self.socket_dir), port=self.port, user=SUPERUSER, dbname="postgres", connect_timeout=3
        )

    def _ready(self) -> bool:
        """The superuser can log in over the socket."""
        import psycopg2

        if not port_open(self.port):
            return False
        try:
            self._superuser_connection().close()
        except psycopg2.OperationalError:
            return False
        return True

    def _after_ready(self) -> None:
        """Create (or reset the password of) ``user`` and create ``database`` owned by it."""
        from psycopg2 import sql

        connection = self._superuser_connection()
        connection.autocommit = True
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (self.user,))
                verb = "ALTER" if cursor.fetchone() else "CREATE"
                cursor.execute(
                    sql.SQL(verb + " ROLE {} LOGIN PASSWORD %s").format(sql.Identifier(self.user)),
                    (self.password,),
                )
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.database,))
                if cursor.fetchone() is None:
                    cursor.execute(
                        sql.SQL("CREATE DATABASE {} OWNER {}").format(
                            sql.Identifier(self.database), sql.Identifier(self.user)
                        )
                    )
        finally:
            connection.close()
        self._check_login()

    def _check_login(self) -> None:
        import psycopg2

        try:
            psycopg2.connect(
                host="127.0.0.1",
                port=self.port,
                user=self.user,
                password=self.password,
                dbname=self.database,
                connect_timeout=5,
            ).close()
        except psycopg2.OperationalError as exc:
            raise ServiceError(
                f"PostgreSQL runs but {self.user} cannot log in to {self.database}: {exc}"
            ) from exc


# -- the server's binaries ---------------------------------------------------------------------------


def find_server_bindir() -> Path | None:
    """The folder with ``postgres`` and ``initdb``: the newest ``/usr/lib/postgresql/*/bin``, else PATH's."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_major_version, reverse=True)
    on_path = shutil.which("postgres")
    # e.g. /usr/local/bin/postgres -> /usr/lib/postgresql/15/bin
    folders = [Path(c) for c in candidates] + ([Path(on_path).resolve().parent] if on_path else [])
    for folder in folders:
        if (folder / "postgres").exists() and (folder / "initdb").exists():
            return folder
    return None


def _major_version(folder: str) -> int:
    try:
        return int(Path(folder).parent.name.split(".")[0])
    except ValueError:
        return 0


def server_bindir() -> Path:
    """The server's binaries, installed first with ``scripts/install-postgres`` when missing."""
    found = find_server_bindir()
    if found is not None:
        return found
    if not INSTALL_SCRIPT.exists():
        raise ServiceError("the PostgreSQL server is not installed; install Debian's 'postgresql' package")
    result = subprocess.run(["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True, check=False)
    found = find_server_bindir()
    if result.returncode != 0 or found is None:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-15:])
        raise ServiceError(f"the PostgreSQL server is not installed and {INSTALL_SCRIPT} failed:\n{tail}")
    return found


def _hand_over(state_dir: Path, user: str) -> None:
    """Make ``state_dir`` owned by ``user`` and reachable by it (traverse-only bits above it)."""
    try:
        account = pwd.getpwnam(user)
    except KeyError:
        raise ServiceError(
            f"PostgreSQL refuses to run as root and there is no '{user}' OS user to run it as; "
            "install Debian's 'postgresql' package (scripts/install-postgres) or run as another user"
        ) from None
    for path in (state_dir, *state_dir.rglob("*")):
        os.chown(path, account.pw_uid, account.pw_gid, follow_symlinks=False)
    os.chmod(state_dir, 0o700)
    for parent in state_dir.resolve().parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH and parent.stat().st_uid == os.geteuid():
            os.chmod(parent, mode | stat.S_IXOTH)
    reachable = subprocess.run(["test", "-w", str(state_dir)], check=False, **_process.as_user(user))
    if reachable.returncode != 0:
        raise ServiceError(
            f"PostgreSQL runs as the '{user}' OS user (it refuses root), and that user cannot reach "
            f"{state_dir}; choose a state folder every user may traverse to (e.g. under /tmp or the checkout)"
        )
