"""What ``discover`` says each GPU of a host is to the library, and what
to do about it: one row per GPU (its VFs counted under it), for every
kind the survey knows, on shipped hosts and on hosts given GPUs the
library does not drive."""

from __future__ import annotations

import pytest

from tests.cli_runs import raw_description, run_json, write_host


def gpus(capsys, host):
    code, data = run_json(capsys, host, "discover")
    assert code == 0
    return {g["address"]: g for g in data["gpus"]}


def with_gpus(tmp_path, *others, name="m10"):
    description = raw_description(name)
    description["other_gpus"] = [*description.get("other_gpus", []), *others]
    return write_host(tmp_path, description)


def gpu(address, vendor, driver=None, total_vfs=None, vfs=(), cls=None):
    found = {
        "address": address,
        "vendor_id": vendor,
        "product_id": "0x1234",
        "driver": driver,
        "vfs": list(vfs),
    }
    if total_vfs is not None:
        found["total_vfs"] = total_vfs
    if cls is not None:
        found["class"] = cls
    return found


def test_each_kind_of_gpu_the_library_drives_says_what_it_offers(capsys):
    m10 = gpus(capsys, "m10")
    assert [g["role"] for g in m10.values()] == ["mdev parent"] * 4
    assert m10["0000:86:00.0"]["note"] == "offers nvidia-36"
    assert m10["0000:86:00.0"]["offered"] and m10["0000:86:00.0"]["vfs"] == 0
    assert not m10["0000:87:00.0"]["offered"]
    assert m10["0000:87:00.0"]["note"].startswith("no enabled type")
    [a2] = gpus(capsys, "a2-vf-parents").values()
    assert a2["role"] == "GPU whose 16 VFs are mdev parents (one provider)"
    assert (a2["note"], a2["vfs"], a2["offered"]) == (
        "offers nvidia-746",
        16,
        True,
    )
    [l40] = gpus(capsys, "l40-sriov").values()
    assert (l40["role"], l40["note"], l40["vfs"]) == (
        "NVIDIA SR-IOV vGPU GPU",
        "offers nvidia-1150",
        32,
    )
    [mixed] = gpus(capsys, "rtx6000-mixed").values()
    assert mixed["note"] == (
        "offers nvidia-1521, nvidia-1540 (a provider each: mixed-size mode)"
    )
    [intel] = gpus(capsys, "intel-igpu-sriov").values()
    assert intel["role"] == "Intel SR-IOV GPU, VFs given as they are"
    assert (intel["note"], intel["vfs"]) == ("offers vf-8086-46d3", 7)
    [amd] = gpus(capsys, "amd-mxgpu").values()
    assert amd["role"] == "AMD SR-IOV GPU, VFs given as they are"
    assert not amd["offered"]
    assert amd["note"].startswith(
        "enable its VFs' type: [devices] enabled_mdev_types = vf-1002-692f"
    )


def test_an_nvidia_sriov_gpu_without_vfs_gives_the_command(capsys, tmp_path):
    description = raw_description("l40-sriov")
    description["sriov"][0]["vf_count"] = 0
    description["sriov"][0]["vf_types"] = {}
    description["guests"] = []
    [l40] = gpus(capsys, write_host(tmp_path, description)).values()
    assert l40["role"] == "NVIDIA SR-IOV vGPU GPU, VFs not enabled"
    assert (
        l40["note"]
        == "enable them: /usr/lib/nvidia/sriov-manage -e 0000:41:00.0"
    )
    assert not l40["offered"]


@pytest.mark.parametrize(
    ("other", "role", "note", "vfs"),
    [
        (
            gpu("0000:b1:00.0", "0x10de", driver="nouveau"),
            "NVIDIA GPU, no vGPU",
            "driver nouveau offers no mdev type and no SR-IOV vGPU: install "
            "NVIDIA's vGPU manager",
            0,
        ),
        (
            gpu("0000:b1:00.0", "0x1a03"),  # a board's ASPEED, no driver
            "0x1a03 GPU, no mediated devices",
            "driver none offers no mdev type and it has no SR-IOV",
            0,
        ),
        (
            gpu("0000:b1:00.0", "0x1002", driver="vfio-pci", total_vfs=16),
            "AMD SR-IOV GPU (0 of 16 VFs enabled)",
            "its VFs are whole PCI devices: enable VFs with its vendor's tool",
            0,
        ),
        (
            gpu(
                "0000:b1:00.0",
                "0x8086",
                driver="vfio-pci",
                total_vfs=7,
                vfs=["0000:b1:00.1", "0000:b1:00.2"],
            ),
            "Intel SR-IOV GPU (2 of 7 VFs enabled)",
            "its VFs are whole PCI devices",
            2,
        ),
        (
            gpu("0000:b1:00.0", "0x1002", cls="0x120000"),  # an accelerator
            "AMD GPU, no mediated devices",
            "driver none offers no mdev type",
            0,
        ),
    ],
)
def test_a_gpu_the_library_does_not_drive_says_why_and_what_to_do(
    capsys, tmp_path, other, role, note, vfs
):
    found = gpus(capsys, with_gpus(tmp_path, other))
    assert len(found) == 5  # m10's four and this one, its VFs under it
    row = found["0000:b1:00.0"]
    assert (row["role"], row["vfs"], row["offered"]) == (role, vfs, False)
    assert row["note"].startswith(note)
    if vfs:  # VFs enabled: nothing more to enable
        assert row["note"] == note


def test_a_device_of_another_class_is_no_gpu(capsys, tmp_path):
    nic = gpu("0000:b1:00.0", "0x15b3", driver="mlx5_core", cls="0x020000")
    assert "0000:b1:00.0" not in gpus(capsys, with_gpus(tmp_path, nic))
