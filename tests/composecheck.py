"""Compose's own loader as a command: ``tools/composecheck`` (compose-go, what ``docker compose config``
is built on), built with Go into ``.cache/bin/composecheck`` the first time it is needed.

The build is keyed by the tool's sources (main.go, go.mod, go.sum) and the Go version; two test runs never
build at once (a file lock); Go's module and build caches live in ``.cache/go`` so a clean clone builds it
with nothing installed by hand but Go itself (modules come from the Go module proxy, checked against
go.sum). ``python -m tests.composecheck [-f FILE] [--env-file FILE]`` prints the normalized project.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SOURCE = REPO_ROOT / "tools" / "composecheck"
CACHE = REPO_ROOT / ".cache"
BINARY = CACHE / "bin" / "composecheck"
GO_CANDIDATES = ("/usr/local/go/bin/go", "/usr/lib/go/bin/go")


def go() -> str:
    """The Go command: ``$LOGSTORE_GO``, else ``go`` on PATH, else the usual install places."""
    found = os.environ.get("LOGSTORE_GO") or shutil.which("go")
    found = found or next((c for c in GO_CANDIDATES if os.access(c, os.X_OK)), None)
    if not found:
        raise RuntimeError(
            "Go is needed to build tools/composecheck (Compose's loader); none on PATH nor in "
            f"{', '.join(GO_CANDIDATES)}: install Go 1.24 or newer, or set LOGSTORE_GO"
        )
    return found


def _go_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GO")}
    env.update(
        GOMODCACHE=str(CACHE / "go" / "mod"),
        GOCACHE=str(CACHE / "go" / "build"),
        GOPATH=str(CACHE / "go" / "path"),
        GOFLAGS="-modcacherw -mod=readonly",  # module cache removable with rm -rf; go.mod/go.sum as committed
        GOTOOLCHAIN="local",
        CGO_ENABLED="0",
    )
    for key in ("GOPROXY", "GONOSUMDB", "GOPRIVATE", "GOINSECURE"):  # keep a machine's proxy settings
        if key in os.environ:
            env[key] = os.environ[key]
    return env


def _key(go_command: str) -> str:
    version = subprocess.run([go_command, "version"], capture_output=True, text=True, check=True).stdout
    digest = hashlib.sha256(version.encode())
    for name in ("main.go", "go.mod", "go.sum"):
        digest.update(hashlib.sha256((SOURCE / name).read_bytes()).digest())
    return digest.hexdigest()[:16]


def binary() -> Path:
    """``.cache/bin/composecheck``, built now unless the one there was built from the same inputs."""
    go_command = go()
    key = _key(go_command)
    stamp = BINARY.with_name(BINARY.name + ".key")
    BINARY.parent.mkdir(parents=True, exist_ok=True)
    with open(BINARY.with_name(BINARY.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs never build it at once
        if BINARY.exists() and stamp.exists() and stamp.read_text().strip() == key:
            return BINARY
        partial = BINARY.with_name(BINARY.name + ".partial")
        done = subprocess.run(
            [go_command, "build", "-trimpath", "-buildvcs=false", "-o", str(partial), "."],
            cwd=SOURCE,
            env=_go_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"building tools/composecheck failed:\n{done.stdout}{done.stderr}")
        os.replace(partial, BINARY)
        stamp.write_text(key + "\n")
    return BINARY


def load(compose: Path, *env_files: Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Compose's loader on ``compose`` with ``env_files`` only (not the process environment)."""
    command = [str(binary()), "-f", str(compose)]
    for env_file in env_files:
        command += ["-env-file", str(env_file)]
    return subprocess.run(command, capture_output=True, text=True, check=False, cwd=cwd or REPO_ROOT)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.composecheck", description=__doc__.split("\n")[0])
    parser.add_argument("-f", type=Path, default=REPO_ROOT / "docker-compose.yml")
    parser.add_argument("--env-file", type=Path, action="append", default=None)
    args = parser.parse_args(argv)
    done = load(args.f, *(args.env_file or [REPO_ROOT / "docker" / ".env.example"]))
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
