"""A host description with a wrong field is exit 2 with one line naming
the field, never a traceback and never a failure later "at libvirt"."""

from __future__ import annotations

import copy
import json

import pytest

from vgpu_driver.cmd import main as cli

PARENT = {
    "address": "0000:84:00.0",
    "vendor_id": "0x10de",
    "product_id": "0x13bd",
    "driver": "nvidia",
    "numa_node": 0,
    "types": [
        {
            "id": "nvidia-35",
            "capacity": 16,
            "name": "GRID M10-0B",
            "description": "num_heads=2, framebuffer=512M",
        }
    ],
}
GUEST = {
    "uuid": "9cfe7035-3a5d-5acd-a42e-254b7382cfa5",
    "name": "vm",
    "mdevs": ["9d742dd5-dc9f-593d-b4e4-1e85926a8dc9"],
}
MDEV = {
    "uuid": "9d742dd5-dc9f-593d-b4e4-1e85926a8dc9",
    "parent": "0000:84:00.0",
    "type": "nvidia-35",
}


def _host(change):
    raw = {
        "parents": [copy.deepcopy(PARENT)],
        "mdevs": [dict(MDEV)],
        "guests": [copy.deepcopy(GUEST)],
    }
    change(raw)
    return raw


def _set(path, value):
    def change(raw):
        target = raw
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


def _drop(path):
    def change(raw):
        target = raw
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return change


BAD = {
    "types[].description": (
        _set(["parents", 0, "types", 0, "description"], 7),
        "parents[0].types[0].description",
    ),
    "types[].name": (
        _set(["parents", 0, "types", 0, "name"], ["x"]),
        "parents[0].types[0].name",
    ),
    "driver": (_set(["parents", 0, "driver"], 1), "parents[0].driver"),
    "no vendor id": (_drop(["parents", 0, "vendor_id"]), "vendor_id"),
    "no product id": (_drop(["parents", 0, "product_id"]), "product_id"),
    "huge numa_node": (
        _set(["parents", 0, "numa_node"], 10**9),
        "parents[0].numa_node",
    ),
    "duplicate hostdev": (
        _set(["guests", 0, "mdevs"], [MDEV["uuid"], MDEV["uuid"]]),
        "guests[0].mdevs[1]",
    ),
}


def _run(capsys, path):
    code = cli.main(["--host-description", str(path), "discover"])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_good_description_is_read(tmp_path, capsys):
    path = tmp_path / "host.json"
    path.write_text(json.dumps(_host(lambda raw: None)))
    code, out, err = _run(capsys, path)
    assert code == 0, err
    assert "0000:84:00.0" in out and MDEV["uuid"] in out


@pytest.mark.parametrize("case", BAD.values(), ids=list(BAD))
def test_a_wrong_field_is_exit_2_naming_it(tmp_path, capsys, case):
    change, field = case
    path = tmp_path / "host.json"
    path.write_text(json.dumps(_host(change)))
    code, out, err = _run(capsys, path)
    assert code == 2, out + err
    assert "Traceback" not in out + err
    assert field in err and "libvirtd" not in err


def test_a_description_that_is_not_utf8_is_exit_2(tmp_path, capsys):
    path = tmp_path / "host.json"
    path.write_bytes(json.dumps(_host(lambda raw: None)).encode() + b"\xff")
    code, out, err = _run(capsys, path)
    assert code == 2 and "not UTF-8" in err
    assert "Traceback" not in out + err
