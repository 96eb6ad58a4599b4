"""An S3-compatible object store for the cluster profile: moto's server (``moto[server]``), no Docker.

:class:`LocalObjectStore` runs ``moto_server -H 127.0.0.1 -p <port>`` (127.0.0.1 only) and creates the
warehouse bucket. moto keeps objects in memory (large ones spill to temporary files, here under
``<state_dir>/tmp``): the bucket's contents do not survive :meth:`~LocalObjectStore.down`. moto accepts
any credentials; clients are given ``access_key``/``secret_key`` all the same, as with a real store.
moto >= 5.2.5: 5.2.0 and 5.2.1 break multipart uploads from Java's and pyarrow's S3 clients.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from airflow_logstore.exceptions import ServiceError
from airflow_logstore.settings import LocalSettings
from logstore_dev.services import _process
from logstore_dev.services._process import PortService, port_open


class LocalObjectStore(PortService):
    """moto's S3 server on ``127.0.0.1:port`` with ``bucket`` in it.

    Promises: :meth:`up` leaves the server answering S3 requests with ``bucket`` listable, or raises
    :class:`ServiceError` with the log's last lines; it is idempotent (a running store is only waited
    for, and the bucket created if missing). :meth:`down` stops it by PID (its process group).
    """

    kind, title, stem = "s3", "moto's S3 server", "moto"
    stop_timeout = 15.0

    def __init__(
        self,
        settings: LocalSettings | None = None,
        *,
        port: int,
        state_dir: Path,
        bucket: str = "warehouse",
        access_key: str,
        secret_key: str,
        region: str = "us-east-1",
    ) -> None:
        super().__init__(settings, port=port, state_dir=state_dir)
        self.bucket = bucket
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = region

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client_properties(self) -> dict[str, str]:
        """pyiceberg's S3 FileIO properties for this store."""
        return {
            "s3.endpoint": self.endpoint,
            "s3.access-key-id": self.access_key,
            "s3.secret-access-key": self.secret_key,
            "s3.region": self.region,
            "s3.path-style-access": "true",
        }

    def client(self) -> Any:
        """A boto3 S3 client of this store."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
        )

    # -- lifecycle -----------------------------------------------------------------------------------

    @property
    def where(self) -> str:
        return self.endpoint

    def _details(self) -> dict[str, Any]:
        return {"endpoint": self.endpoint, "bucket": self.bucket}

    def _is_ours(self, pid: int) -> bool:
        command = _process.cmdline(pid)
        return any("moto" in part for part in command) and str(self.port) in command

    def _start(self) -> None:
        (self.state_dir / "tmp").mkdir(parents=True, exist_ok=True)
        self.process.launch(
            [*_moto_command(), "-H", "127.0.0.1", "-p", str(self.port)],
            env=self._env(),
            ports=[self.port],
        )

    def _env(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
        env.update(
            TMPDIR=str(self.state_dir / "tmp"),
            AWS_ACCESS_KEY_ID=self.access_key,
            AWS_SECRET_ACCESS_KEY=self.secret_key,
            AWS_DEFAULT_REGION=self.region,
        )
        return env

    def _ready(self) -> bool:
        """The bucket is listable (created when missing)."""
        if not port_open(self.port):
            return False
        from botocore.exceptions import BotoCoreError, ClientError

        client = self.client()
        try:
            client.list_objects_v2(Bucket=self.bucket, MaxKeys=1)
            return True
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "NoSuchBucket":
                return False
        except BotoCoreError:
            return False
        self._create_bucket(client)
        return False

    def _create_bucket(self, client: Any) -> None:
        from botocore.exceptions import ClientError

        arguments: dict[str, Any] = {"Bucket": self.bucket}
        if self.region != "us-east-1":
            arguments["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
        try:
            client.create_bucket(**arguments)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise ServiceError(f"moto could not create the bucket {self.bucket}: {exc}") from exc


def _moto_command() -> list[str]:
    """``moto_server`` of this interpreter's environment (the ``moto[server]`` extra, ``cluster``)."""
    script = Path(sys.executable).parent / "moto_server"
    if script.exists():
        return [str(script)]
    found = shutil.which("moto_server")
    if found:
        return [found]
    raise ServiceError(
        "moto's S3 server is not installed; install the cluster extra: "
        "pip install 'airflow-logstore[cluster]'"
    )
