"""An embedded Placement: the real openstack-placement WSGI app on
127.0.0.1 with SQLite, for tests and the demo (``vgpu-driver
placement-server``). The ``openstack-placement`` package is a test/demo
dependency, not a runtime one.

Authentication is Placement's ``noauth2``: clients use keystoneauth's
``admin_token`` plugin with the token ``admin``.
"""

from __future__ import annotations

import socketserver
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from wsgiref import simple_server

from oslo_config import cfg

from vgpu_driver.exception import VgpuDriverError

WSGIApp = Callable[..., Any]


class PlacementNotInstalled(VgpuDriverError):
    msg_fmt = (
        "The embedded Placement needs the openstack-placement package: "
        "pip install 'vgpu-driver[demo]' (%(reason)s)"
    )
    code = "vgpu_driver.placement.not_installed"


def make_app(database: Path) -> WSGIApp:
    """Placement's WSGI app on a SQLite file, schema created if needed."""
    try:
        from placement import conf as placement_conf
        from placement import db_api, deploy
    except ImportError as exc:
        raise PlacementNotInstalled(reason=str(exc)) from exc
    config = cfg.ConfigOpts()
    placement_conf.register_opts(config)
    config.set_default(
        "connection",
        f"sqlite:///{database.resolve()}",
        group="placement_database",
    )
    config.set_override("sync_on_startup", True, group="placement_database")
    config.set_override("auth_strategy", "noauth2", group="api")
    config([], default_config_files=[])
    db_api.configure(config)
    app: WSGIApp = deploy.loadapp(config)
    return _serialized(_service_roles(app))


def _service_roles(app: WSGIApp) -> WSGIApp:
    """With Keystone, a compute node's Placement user has the ``service``
    role (Placement's policy wants it for ``POST /reshaper``). noauth2
    gives the ``admin`` token only ``admin``; give it both, as a
    deployment's service user has."""

    def application(environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("HTTP_X_AUTH_TOKEN") == "admin":
            environ.setdefault("HTTP_X_ROLES", "admin,service,member,reader")
        return app(environ, start_response)

    return application


def _serialized(app: WSGIApp) -> WSGIApp:
    """SQLite takes one writer at a time and answers "database is locked"
    to a second one: serve one request at a time, as a single-worker
    Placement would (connections are still accepted concurrently)."""
    lock = threading.Lock()

    def application(environ: dict[str, Any], start_response: Any) -> Any:
        with lock:
            return list(app(environ, start_response))

    return application


class _ThreadingServer(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


class _QuietHandler(simple_server.WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Placement logs its requests itself."""


def serve(host: str, port: int, database: Path, ready: Any = None) -> None:
    """Serve until interrupted; prints ``listening on URL`` when ready."""
    app = make_app(database)
    server = simple_server.make_server(
        host, port, app, _ThreadingServer, _QuietHandler
    )
    url = f"http://{host}:{server.server_port}"
    print(f"Placement listening on {url}", flush=True)
    print(
        "Clients (nova.conf or vgpu-driver) need:\n" + conf_section(url),
        flush=True,
    )
    if ready is not None:
        ready(url)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8778)
    parser.add_argument("--database", default="placement.sqlite")
    args = parser.parse_args(argv)
    try:
        serve(args.host, args.port, Path(args.database))
    except KeyboardInterrupt:
        return 0
    except VgpuDriverError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())


class EmbeddedPlacement:
    """The embedded Placement in a subprocess, on a free 127.0.0.1 port.

    ``with EmbeddedPlacement(folder) as placement: placement.url``
    """

    def __init__(self, directory: Path, *, timeout: float = 60) -> None:
        self.directory = Path(directory)
        self.timeout = timeout
        self.url = ""
        self.log = self.directory / "placement.log"
        self._process: Any = None

    def __enter__(self) -> EmbeddedPlacement:
        import os
        import socket
        import subprocess
        import time
        import urllib.request

        self.directory.mkdir(parents=True, exist_ok=True)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        with open(self.log, "w") as out:
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "vgpu_driver.cmd.main",
                    "placement-server",
                    "--port",
                    str(port),
                    "--database",
                    str(self.directory / "placement.sqlite"),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                break
            try:
                urllib.request.urlopen(self.url, timeout=1).close()
                return self
            except OSError:
                time.sleep(0.2)
        self.__exit__()
        raise PlacementNotInstalled(
            reason="the embedded Placement did not start: "
            + self.log.read_text()[-2000:]
        )

    def __exit__(self, *exc: object) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(timeout=20)

    def conf_section(self) -> str:
        """A ``[placement]`` section for clients of this Placement."""
        return conf_section(self.url)


def conf_section(url: str) -> str:
    """The ``[placement]`` section a client of the embedded Placement
    needs (noauth2 takes the admin token)."""
    return (
        "[placement]\n"
        "auth_type = admin_token\n"
        f"endpoint = {url}\n"
        "token = admin\n"
        f"endpoint_override = {url}\n"
    )
