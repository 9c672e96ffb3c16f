"""``vgpu-driver audit`` against a real Placement and a simulated host."""

from __future__ import annotations

import json
import uuid

import pytest

from tests import helpers, placement_helpers, records_helpers
from vgpu_driver.cmd import main as cli

pytestmark = pytest.mark.functional


def _cli(capsys, conf, *args):
    code = cli.main(
        ["--config-file", str(conf), "--host-description", "demo", *args]
    )
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out


@pytest.fixture
def node_conf(tmp_path, placement_url):
    conf = tmp_path / "nova.conf"
    host = f"audit-{uuid.uuid4().hex[:8]}"
    conf.write_text(
        helpers.load("demo").config.replace(
            "host = compute1", f"host = {host}"
        )
        + f"[devices]\nstate_path = {tmp_path / 'state'}\n"
        "[placement]\nauth_type = admin_token\ntoken = admin\n"
        f"endpoint = {placement_url}\nendpoint_override = {placement_url}\n"
    )
    return conf, host


def test_audit_lists_each_mismatch_and_fixes_only_what_is_safe(
    node_conf, tmp_path, capsys, client
):
    conf, host = node_conf
    assert _cli(capsys, conf, "sync")[0] == 0
    [rp] = client.request(
        "GET", f"/resource_providers?name={host}_pci_0000_85_00_0"
    ).body["resource_providers"]
    stranger = str(uuid.uuid4())
    client.request(
        "PUT",
        f"/allocations/{stranger}",
        body={
            "allocations": {rp["uuid"]: {"resources": {"VGPU": 1}}},
            "project_id": str(uuid.uuid4()),
            "user_id": str(uuid.uuid4()),
            "consumer_generation": None,
        },
        ok=(204,),
    )
    stale = "0c1d2e3f-0000-4000-8000-000000000001"
    (tmp_path / "state" / "claims.json").write_text(
        json.dumps(
            {
                "epoch": 7,
                "claims": {
                    stale: {
                        "kind": "mdev",
                        "id": stale,
                        "parent": "pci_0000_85_00_0",
                        "type_id": "nvidia-35",
                        "created": True,
                        "instance": "gone-instance",
                        "purpose": "spawn",
                    }
                },
            }
        )
    )
    code, out = _cli(capsys, conf, "audit", "--format", "json")
    report = json.loads(out)
    assert code == 1 and report["placement_checked"]
    found = {(f["kind"], f["subject"]) for f in report["findings"]}
    assert ("allocation_without_guest", stranger) in found
    assert ("claim_of_gone_instance", stale) in found
    # the demo's guests hold devices but no allocations
    guests = {g.uuid for g in helpers.load("demo").guests}
    assert {
        s for k, s in found if k == "guest_device_without_allocation"
    } == guests

    # in text: Placement was checked, no note; a row per finding
    code, out = _cli(capsys, conf, "audit")
    assert code == 1 and "NOTE" not in out
    assert any(stale in line and "yes" in line for line in out.splitlines())

    code, out = _cli(capsys, conf, "audit", "--fix", "--format", "json")
    assert code == 1  # allocations are only reported
    assert json.loads(out)["fixed"] == [f"dropped the claim on {stale}"]
    assert records_helpers.claims_on_disk(tmp_path / "state") == {}
    # the allocation is untouched
    body = client.request("GET", f"/allocations/{stranger}").body
    assert rp["uuid"] in body["allocations"]


def test_audit_without_placement_checks_the_host_and_says_so(tmp_path, capsys):
    conf = tmp_path / "nova.conf"
    conf.write_text(
        helpers.load("demo").config
        + f"[devices]\nstate_path = {tmp_path / 'state'}\n"
    )
    code, out = _cli(capsys, conf, "audit")
    assert "Placement not checked" in out and code == 0


def test_restore_holds_the_devices_of_a_spawn_in_flight(
    node_conf, tmp_path, capsys, client
):
    """``restore`` beside a running service moves a damaged claims
    record aside: a consumer holding units in Placement with no guest
    here (a spawn in flight) keeps every free mdev of that parent."""
    conf, host = node_conf
    assert _cli(capsys, conf, "sync")[0] == 0
    [rp] = client.request(
        "GET", f"/resource_providers?name={host}_pci_0000_86_00_0"
    ).body["resource_providers"]
    spawning = str(uuid.uuid4())
    placement_helpers.allocate(client, spawning, rp["uuid"])
    (tmp_path / "state" / "claims.json").write_text("\xff not json")
    code, out = _cli(capsys, conf, "restore", "--format", "json")
    report = json.loads(out)
    assert code == 0 and report["note"] is None
    assert len(report["records_moved_aside"]) == 1
    free_on_86 = "e905c06b-d33d-55fa-b0e1-6654dc764fac"  # demo.json
    assert report["held_in_flight"] == {spawning: [free_on_86]}
    claims = records_helpers.claims_on_disk(tmp_path / "state")
    assert claims[free_on_86]["instance"] == spawning
    # the audit no longer calls it an allocation without a guest
    code, out = _cli(capsys, conf, "audit", "--format", "json")
    kinds = {(f["kind"], f["subject"]) for f in json.loads(out)["findings"]}
    assert ("allocation_without_guest", spawning) not in kinds


def test_restore_without_placement_says_in_flight_spawns_are_not_held(
    tmp_path, capsys
):
    conf = tmp_path / "nova.conf"
    conf.write_text(
        helpers.load("demo").config
        + f"[devices]\nstate_path = {tmp_path / 'state'}\n"
    )
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "claims.json").write_text("{")
    code = cli.main(
        ["--config-file", str(conf), "--host-description", "demo", "restore"]
    )
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in out + err
    assert "Moved an unreadable record aside" in out
    assert "spawns in flight are not held" in err


def test_a_guest_whose_mdev_a_reboot_took_still_matches_its_allocation(
    node_conf, tmp_path, capsys, client
):
    """After a host reboot the mdevs are gone until they are made again,
    while the guests still name them. The audit finds the provider of
    such an mdev by where it was seen: a guest allocated there is no
    mismatch (neither a guest device without allocation nor an
    allocation without guest): the finding is the device gone."""
    from tests.cli_runs import raw_description

    conf, host = node_conf
    description = raw_description("demo")
    guest = next(g for g in description["guests"] if len(g["mdevs"]) == 1)
    [mdev] = [m for m in description["mdevs"] if m["uuid"] in guest["mdevs"]]
    before = tmp_path / "before.json"
    before.write_text(json.dumps(description))
    args = ["--config-file", str(conf), "--host-description", str(before)]
    for command in ("sync", "audit"):  # the mdevs seen, with their guests
        cli.main([*args, command])
    parent = "pci_" + mdev["parent"].replace(":", "_").replace(".", "_")
    [rp] = client.request(
        "GET", f"/resource_providers?name={host}_{parent}"
    ).body["resource_providers"]
    placement_helpers.allocate(client, guest["uuid"], rp["uuid"])
    # rebooted: the mdev is gone, the guest still names it
    description["mdevs"].remove(mdev)
    after = tmp_path / "after.json"
    after.write_text(json.dumps(description))
    capsys.readouterr()
    cli.main(
        [
            "--config-file",
            str(conf),
            "--host-description",
            str(after),
            "audit",
            "--format",
            "json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert report["placement_checked"]
    kinds = {
        f["kind"] for f in report["findings"] if f["subject"] == guest["uuid"]
    }
    # said as what it is: the guest's device is gone, not its allocation
    assert kinds == {"guest_device_gone"}


def test_allocations_read_for_audit_and_restore_are_the_devices_alone(
    placement_url, tmp_path, client
):
    """An instance's allocations hold its VCPU on the node's root beside
    its VGPU on a device provider (as Nova's are): ``audit`` and
    ``restore`` see the device's units alone; an instance with nothing
    on a device (its VGPU still on the root, from before a reshape, or
    none) is not one of theirs."""
    from vgpu_driver.placement.allocations import in_flight_candidates

    node = placement_helpers.PlacementNode(placement_url, tmp_path)
    node.sync()
    view = placement_helpers.placement_view(client, node.nodename)
    root, device = view[node.nodename][2], view["pci_0000_85_00_0"][2]
    on_root = {"total": 8, "max_unit": 8}
    placement_helpers.put_inventory(
        client, root, {"VCPU": on_root, "VGPU": on_root}
    )
    guest, plain, old = (str(uuid.uuid4()) for _ in range(3))
    for consumer, held in (
        (guest, {root: {"VCPU": 2}, device: {"VGPU": 1}}),
        (plain, {root: {"VCPU": 1}}),
        (old, {root: {"VCPU": 1, "VGPU": 1}}),
    ):
        placement_helpers.put_allocations(client, consumer, held)
    found = in_flight_candidates(node.conf, node.nodename, {"VGPU"})
    assert found[guest] == {"pci_0000_85_00_0": 1}
    assert not {plain, old} & found.keys()
