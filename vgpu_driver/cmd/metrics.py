"""``vgpu-driver metrics``: the host's device metrics for Prometheus.

Printed once, written for node_exporter's textfile collector
(``--textfile``), or served over HTTP (``--serve``, 127.0.0.1 unless
told otherwise) with a refresh every ``--interval`` seconds. Beside a
compute service give it ``--nova-node`` to read that node's records."""

from __future__ import annotations

import sys
import time

from prometheus_client import (
    CollectorRegistry,
    generate_latest,
    start_http_server,
    write_to_textfile,
)

from vgpu_driver.cmd.context import Context
from vgpu_driver.cmd.inventory import build_tree
from vgpu_driver.metrics import MeteredDriver


def _address(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(
            f"--serve {value!r}: give ADDRESS:PORT, e.g. 127.0.0.1:9847"
        )
    return host or "127.0.0.1", int(port)


def run(context: Context) -> int:
    conf = context.conf
    registry = CollectorRegistry()
    driver = MeteredDriver(conf, context.host, registry=registry)
    nodename = conf.host
    tree = build_tree(driver, nodename)
    command = conf.command
    if command.serve:
        try:
            address, port = _address(command.serve)
        except ValueError as exc:
            print(f"ERROR: {exc}", file=sys.stderr)
            return 2
        server, _thread = start_http_server(port, address, registry)
        print(f"Serving metrics on http://{address}:{server.server_port}/")
        sys.stdout.flush()
        while True:  # until interrupted
            time.sleep(command.interval)
            driver.update_provider_tree(tree, nodename)
    if command.textfile:
        write_to_textfile(command.textfile, registry)
        return 0
    sys.stdout.write(generate_latest(registry).decode())
    return 0
