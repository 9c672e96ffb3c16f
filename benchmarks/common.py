"""Shared set-up of the benchmarks."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import pwd
import shutil
import statistics
import subprocess
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from oslo_config import cfg

from vgpu_driver import conf as vconf
from vgpu_driver.sim import description as hostdesc


def dense(
    parents: int, mdevs: int, guests: int, types: int = 1
) -> hostdesc.HostDescription:
    """``dense_raw``'s host; with ``types`` > 1 each pGPU also lists that
    many types in all, as a GRID card does (the others have no room once
    one type is in use)."""
    raw = hostdesc.dense_raw(parents, mdevs, guests)
    for parent in raw["parents"]:
        for k in range(1, types):
            framebuffer = (512, 1024, 2048, 4096, 8192)[k % 5]
            parent["types"].append(
                {
                    "id": f"nvidia-{200 + k}",
                    "name": f"GRID M10-{framebuffer // 1024}Q",
                    "capacity": 0,
                    "description": "num_heads=4, frl_config=60, "
                    f"framebuffer={framebuffer}M, max_resolution=5120x2880, "
                    f"max_instance={8192 // framebuffer}",
                }
            )
    return hostdesc.parse(json.dumps(raw), "bench")


def sriov(cards: int, used_per_card: int = 16) -> hostdesc.HostDescription:
    """``cards`` NVIDIA L40s on a kernel >= 6.8 (32 SR-IOV VFs each, as
    the shipped ``l40-sriov`` host's), ``used_per_card`` VFs of each set
    to the enabled type and in use by one guest each."""
    l40 = hostdesc.load("l40-sriov")
    [card] = l40.pfs
    pfs, guests = [], []
    for i in range(cards):
        pf = dataclasses.replace(card, address=f"0000:{0x41 + i:02x}:00.0")
        pf.vf_types = {vf: 1150 for vf in pf.vf_addresses[:used_per_card]}
        pfs.append(pf)
        guests += [
            hostdesc.GuestSpec(
                uuid=str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, vf)),
                name=f"instance-{len(guests) + n:08x}",
                pci=[vf],
            )
            for n, vf in enumerate(pf.vf_types)
        ]
    return dataclasses.replace(
        l40,
        pfs=pfs,
        guests=guests,
        config="[devices]\nenabled_mdev_types = nvidia-1150\n",
    )


def conf_for(text: str, directory: Path, name: str = "vgpu") -> cfg.ConfigOpts:
    """A ConfigOpts from INI text, with its state kept in ``directory``."""
    path = directory / f"{name}.conf"
    path.write_text(text)
    conf = cfg.ConfigOpts()
    vconf.register_opts(conf)
    conf(["--config-file", str(path)], default_config_files=[])
    conf.set_override(
        "state_path", str(directory / f"{name}-state"), "devices"
    )
    return conf


def machine() -> str:
    """One line naming what the figures were taken on."""
    import libvirt

    version = libvirt.getVersion()
    return (
        f"machine: {platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"libvirt {version // 1_000_000}.{version // 1000 % 1000}"
    )


_LOOP: list[threading.Thread] = []


def event_loop() -> None:
    """libvirt's default event loop, run on a thread as a compute service
    runs one (Nova's ``Host`` starts it before connecting): the node-device
    events the library watches come through it. Started once; the
    connections opened after it can give events."""
    if _LOOP:
        return
    import libvirt

    libvirt.virEventRegisterDefaultImpl()

    def run() -> None:
        while True:
            libvirt.virEventRunDefaultImpl()

    _LOOP.append(threading.Thread(target=run, daemon=True))
    _LOOP[0].start()


def spread(samples: Sequence[float]) -> str:
    """``min/median/max`` of samples in milliseconds."""
    return (
        f"{min(samples):.2f}/{statistics.median(samples):.2f}/"
        f"{max(samples):.2f}"
    )


@contextlib.contextmanager
def libvirt_daemon(directory: Path) -> Iterator[Callable[[str], str]]:
    """This machine's ``libvirtd``, in session mode, serving libvirt
    test-driver hosts over its UNIX socket: every call is then a round
    trip to a daemon, as a compute service's calls to its host's
    libvirtd are (in-process, a test-driver call costs about what a
    Python function call does). As root it runs as ``nobody``, the
    session mode libvirt allows an unprivileged user.

    Yields a function turning a ``test:///PATH`` URI into the daemon's
    ``test+unix:///PATH?socket=...`` one. The hosts' files must be
    readable by the daemon's user (see :func:`readable_by_daemon`).
    """
    binary = shutil.which("libvirtd") or "/usr/sbin/libvirtd"
    if not os.access(binary, os.X_OK):
        raise SystemExit(
            "--daemon needs libvirtd: install Debian's libvirt-daemon "
            "(apt-get install -y libvirt-daemon)"
        )
    readable_by_daemon(directory)
    home = directory / "libvirtd"
    runtime = home / "run"
    # started again in the same directory, as libvirtd restarts: same
    # socket, same URI
    runtime.mkdir(parents=True, exist_ok=True)
    runtime.chmod(0o700)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_RUNTIME_DIR": str(runtime),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_CACHE_HOME": str(home / "cache"),
    }
    user: int | None = None
    group: int | None = None
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        user, group = nobody.pw_uid, nobody.pw_gid
        for path in (home, runtime):
            os.chown(path, user, group)
    log = open(home / "libvirtd.log", "ab")  # noqa: SIM115 (kept open)
    daemon = subprocess.Popen(
        [binary],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        user=user,
        group=group,
    )
    socket = runtime / "libvirt" / "libvirt-sock"
    socket.unlink(missing_ok=True)  # a stopped daemon's
    try:
        deadline = time.monotonic() + 30
        while not socket.exists():
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(
                    f"libvirtd did not start; see {home / 'libvirtd.log'}:\n"
                    + (home / "libvirtd.log").read_text()[-2000:]
                )
            time.sleep(0.05)
        yield (
            lambda uri: (
                uri.replace("test://", "test+unix://", 1) + f"?socket={socket}"
            )
        )
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
        log.close()


def readable_by_daemon(directory: Path) -> None:
    """Let :func:`libvirt_daemon`'s user read a host written below
    ``directory`` (a temporary directory is private to its owner)."""
    directory.chmod(0o755)


def shape_label(shape: tuple[int, int, int, int]) -> str:
    """``pGPUs/mdevs/guests``, and ``T<n>`` when each lists n types."""
    parents, mdevs, guests, types = shape
    name = f"{parents}/{mdevs}/{guests}"
    return f"{name} T{types}" if types > 1 else name
