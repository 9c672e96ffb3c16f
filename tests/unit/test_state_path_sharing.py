"""state_path as a production host has it: the service runs as its own
user, root runs the operator's tools, and a host with no vGPU configured
has no such directory at all."""

from __future__ import annotations

import os
import threading

import pytest

from tests import helpers
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.records.store import StateStore, StateStoreError

SERVICE_UID = 4242  # a user like nova: not root, owns state_path


def test_a_host_with_no_vgpu_configured_never_needs_state_path(
    make_conf, tmp_path
):
    """nova-compute on a host without vGPUs configured: a state_path
    that cannot be made (its parent is a file, so not even root could)
    stops neither init_host nor a refresh, and nothing is created."""
    parent = tmp_path / "not-a-directory"
    parent.write_text("")
    state = parent / "vgpu"
    conf = make_conf("[devices]\n")
    conf.set_override("state_path", str(state), "devices")
    driver = VgpuDriver(conf, helpers.simulated_host("m10"))
    driver.init_host([])
    tree = helpers.new_tree()
    plans = driver.update_provider_tree(tree, "node1")
    # guests' devices of no enabled type: kept, nothing new offered
    assert all(p.reserved == p.total for p in plans)
    driver.update_provider_tree(tree, "node1")
    assert parent.read_text() == ""


def test_records_are_made_at_the_first_save_only(tmp_path):
    store = StateStore(tmp_path / "a" / "b")
    with store.locked():
        assert store.load("claims", {"x": 1}) == {"x": 1}
    assert not (tmp_path / "a").exists()
    store.update("claims", lambda c: {**c, "y": 2}, {})
    assert store.load("claims", {}) == {"y": 2}
    assert (tmp_path / "a" / "b" / ".lock").exists()


def test_a_first_save_never_writes_over_records_it_did_not_read(tmp_path):
    """Two processes on a host with no records yet: one reads nothing
    (no directory), the other makes the directory and a record; the
    first one's save fails instead of writing over it."""
    directory = tmp_path / "state"
    first, second = StateStore(directory), StateStore(directory)
    read = threading.Event()
    written = threading.Event()
    outcome: list[BaseException | None] = []

    def reader() -> None:
        try:
            with first.locked():
                first.load("claims", {})
                read.set()
                written.wait(5)
                first.save("claims", {"mine": 1})
            outcome.append(None)
        except StateStoreError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    read.wait(5)
    second.save("claims", {"theirs": 1})
    written.set()
    thread.join(5)
    assert isinstance(outcome[0], StateStoreError)
    assert "another process wrote claims.json" in str(outcome[0])
    assert second.load("claims", {}) == {"theirs": 1}


def test_a_first_save_goes_on_where_another_made_only_the_directory(
    tmp_path,
):
    """The other process made the directory (and its lock) but recorded
    nothing: there is nothing this one did not read, and its first save
    is made."""
    directory = tmp_path / "state"
    first = StateStore(directory)
    with first.locked():
        assert first.load("claims", {}) == {}
        directory.mkdir()  # another process, between the read and the save
        (directory / ".lock").touch()
        first.save("claims", {"mine": 1})
    assert StateStore(directory).load("claims", {}) == {"mine": 1}


def test_a_directory_another_made_after_it_was_found_missing_is_no_error(
    tmp_path, monkeypatch
):
    """Two processes starting at once (the compute service and ``sync
    --periodic`` at boot) both find state_path missing; the second to
    make it finds it made, and goes on."""
    from pathlib import Path

    directory = tmp_path / "vgpu" / "node1"
    found_missing = Path.exists

    def exists(path: Path) -> bool:
        if path == directory and not found_missing(path):
            directory.mkdir(parents=True)  # the other, right after
            return False
        return found_missing(path)

    monkeypatch.setattr(Path, "exists", exists)
    store = StateStore(directory)
    store.save("claims", {"mine": 1})
    assert StateStore(directory).load("claims", {}) == {"mine": 1}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_what_root_writes_belongs_to_the_owner_of_state_path(tmp_path):
    """restore or audit --fix run as root beside a service running as
    its own user: the directories, lock and records root makes are the
    service user's, so the service can lock and rewrite them."""
    home = tmp_path / "nova"
    home.mkdir()
    os.chown(home, SERVICE_UID, SERVICE_UID)
    store = StateStore(home / "vgpu" / "node1")
    store.save("claims", {"c": 1})
    made = [
        home / "vgpu",
        home / "vgpu" / "node1",
        home / "vgpu" / "node1" / ".lock",
        home / "vgpu" / "node1" / "claims.json",
    ]
    for path in made:
        assert os.stat(path).st_uid == SERVICE_UID, path
        assert os.stat(path).st_gid == SERVICE_UID, path
    # and a record rewritten by root stays the service's
    store.update("claims", lambda c: {**c, "d": 2}, {})
    assert os.stat(made[-1]).st_uid == SERVICE_UID


def nova_style_conf(tmp_path, text):
    from oslo_config import cfg

    from vgpu_driver import conf as vconf
    from vgpu_driver.cmd.context import register_cli_opts

    path = tmp_path / "nova.conf"
    path.write_text(text)
    conf = cfg.ConfigOpts()
    vconf.register_opts(conf)
    register_cli_opts(conf)
    return conf, path


def test_unset_state_path_is_under_nova_s_own_and_the_tools_agree(tmp_path):
    """Unset [devices] state_path: nova-compute keeps its records under
    Nova's [DEFAULT] state_path (which the nova user owns), and a command
    given --nova-node and the same nova.conf finds them there."""
    from oslo_config import cfg

    from vgpu_driver.cmd.context import open_context
    from vgpu_driver.conf import devices
    from vgpu_driver.nova import nova_state_path

    nova_home = tmp_path / "lib-nova"
    text = f"[DEFAULT]\nstate_path = {nova_home}\n[devices]\n"
    service, path = nova_style_conf(tmp_path, text)
    service.register_opt(cfg.StrOpt("state_path"))  # Nova registers it
    service(["--config-file", str(path)], default_config_files=[])
    kept = nova_state_path(devices.records_path(service), "node7")
    assert kept == str(nova_home / "vgpu" / "node7")

    tool, _ = nova_style_conf(tmp_path, text)
    argv = ["--config-file", str(path), "--nova-node", "node7"]
    tool(argv, default_config_files=[])
    context = open_context(tool, argv)
    try:
        assert tool.devices.state_path == kept
    finally:
        context.close()


def test_unset_state_path_outside_nova_is_the_standalone_default(make_conf):
    from vgpu_driver.conf import devices

    conf = make_conf("[devices]\n")
    conf.clear_override("state_path", "devices")
    assert devices.records_path(conf) == "/var/lib/vgpu-driver"


def test_a_driver_keeping_no_records_starts_and_writes_none(
    make_conf, tmp_path
):
    """``persist=False`` (a report on a throwaway tree): its start has
    no records to repair and its refreshes leave none on disk."""
    description = helpers.load("m10")
    conf = make_conf(description.config)
    state = tmp_path / "state"
    conf.set_override("state_path", str(state), "devices")
    driver = VgpuDriver(
        conf, helpers.SimulatedHost(description), persist=False
    )
    done = driver.init_host([])
    assert done["records_moved_aside"] == []
    plans = driver.update_provider_tree(helpers.new_tree(), "node1")
    assert sum(p.total for p in plans) > 0
    assert not state.exists()
