"""A host description rendered for libvirt's test driver (its XML) and
as a fake sysfs tree (what libvirt does not report: SR-IOV VFs, type
descriptions, drivers, virtual parents)."""

from __future__ import annotations

import os
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from vgpu_driver.sim.guest_xml import render_guest
from vgpu_driver.sim.specs import (
    HostDescription,
    OtherGpuSpec,
    ParentSpec,
    PfSpec,
    css_bus_id,
)

SYSTEM_UUID = "3a2bc4a0-6e8f-4a8e-9c1c-1c8bfa0d1e11"


def render_libvirt_xml(description: HostDescription) -> str:
    """The host as libvirt's test driver reads it."""
    out = ["<node>"]
    out.append(
        "  <device>\n    <name>computer</name>\n"
        "    <capability type='system'><hardware>"
        f"<uuid>{SYSTEM_UUID}</uuid></hardware></capability>\n"
        "  </device>"
    )
    for parent in description.parents:
        out.append(_render_parent(description, parent))
    for mdev in description.mdevs:
        # libvirt has no node device for a virtual parent: it names the
        # mdev's parent "computer" (the adapter finds the real one in sysfs)
        parent_name = mdev.parent
        if description.parent(mdev.parent).kind == "virtual":
            parent_name = "computer"
        out.append(
            "  <device>\n"
            f"    <name>{mdev.libvirt_name}</name>\n"
            f"    <parent>{escape(parent_name)}</parent>\n"
            "    <capability type='mdev'>\n"
            f"      <type id={quoteattr(mdev.type)}/>\n"
            + ("" if mdev.legacy_name else f"      <uuid>{mdev.uuid}</uuid>\n")
            + f"      <iommuGroup number='{mdev.iommu_group}'/>\n"
            "    </capability>\n"
            "  </device>"
        )
    for guest in description.guests:
        out.append(render_guest(guest))
    out.append("</node>")
    return "\n".join(out) + "\n"


def _render_types(description: HostDescription, parent: ParentSpec) -> str:
    rows = ["<capability type='mdev_types'>"]
    for spec in parent.types:
        rows.append(f"<type id={quoteattr(spec.id)}>")
        if spec.name is not None:
            rows.append(f"<name>{escape(spec.name)}</name>")
        rows.append(f"<deviceAPI>{escape(spec.device_api)}</deviceAPI>")
        rows.append(
            "<availableInstances>"
            f"{description.available(parent, spec.id)}"
            "</availableInstances>"
        )
        rows.append("</type>")
    rows.append("</capability>")
    return "\n".join(rows)


def _render_parent(description: HostDescription, parent: ParentSpec) -> str:
    types = _render_types(description, parent)
    head = (
        f"  <device>\n    <name>{escape(parent.name)}</name>\n"
        f"    <path>/sys/{parent.sysfs_path}</path>\n"
        "    <parent>computer</parent>\n"
    )
    if parent.driver:
        head += f"    <driver><name>{escape(parent.driver)}</name></driver>\n"
    if parent.kind == "pci":
        assert parent.address is not None
        domain, bus, rest = parent.address.split(":")
        slot, function = rest.split(".")
        body = (
            "<capability type='pci'>\n<class>0x030000</class>\n"
            f"<domain>{int(domain, 16)}</domain><bus>{int(bus, 16)}</bus>"
            f"<slot>{int(slot, 16)}</slot>"
            f"<function>{int(function, 16)}</function>\n"
        )
        if parent.product_id:
            body += (
                f"<product id={quoteattr(parent.product_id)}>"
                f"{escape(parent.product or '')}</product>\n"
            )
        if parent.vendor_id:
            body += (
                f"<vendor id={quoteattr(parent.vendor_id)}>"
                f"{escape(parent.vendor or '')}</vendor>\n"
            )
        if parent.physical_function:
            pf_domain, pf_bus, pf_rest = parent.physical_function.split(":")
            pf_slot, pf_function = pf_rest.split(".")
            body += (
                "<capability type='phys_function'>\n"
                f"<address domain='0x{pf_domain}' bus='0x{pf_bus}' "
                f"slot='0x{pf_slot}' function='0x{pf_function}'/>\n"
                "</capability>\n"
            )
        body += types + "\n"
        body += (
            f"<iommuGroup number='{parent.iommu_group}'>"
            f"<address domain='0x{domain}' bus='0x{bus}' slot='0x{slot}' "
            f"function='0x{function}'/></iommuGroup>\n"
        )
        if parent.numa_node is not None:
            body += f"<numa node='{parent.numa_node}'/>\n"
        body += "</capability>"
    elif parent.kind == "css":
        cssid, ssid, devno = css_bus_id(parent.name).split(".")
        body = (
            "<capability type='css'>\n"
            f"<cssid>0x{cssid}</cssid><ssid>0x{ssid}</ssid>"
            f"<devno>0x{devno}</devno>\n{types}\n</capability>"
        )
    elif parent.kind == "ap_matrix":
        body = f"<capability type='ap_matrix'>\n{types}\n</capability>"
    else:
        # libvirt has no node device for a virtual parent such as mtty:
        # it is found in sysfs (class/mdev_bus) only.
        return "  <!-- virtual parent " + escape(parent.name) + " -->"
    return head + body + "\n  </device>"


def render_sysfs(description: HostDescription, root: Path) -> None:
    """Write the fake sysfs tree of the host below ``root``."""
    for parent in description.parents:
        base = root / parent.sysfs_path
        base.mkdir(parents=True, exist_ok=True)
        _link(root / "class/mdev_bus" / base.name, base)
        if parent.kind == "pci":
            _link(root / "bus/pci/devices" / base.name, base)
            _write(base / "vendor", parent.vendor_id or "")
            _write(base / "device", parent.product_id or "")
            _write(base / "class", "0x030000")
            numa = -1 if parent.numa_node is None else parent.numa_node
            _write(base / "numa_node", str(numa))
        if parent.driver:
            _bind(base, root / "bus" / _bus_of(parent), parent.driver)
        for spec in parent.types:
            tdir = base / "mdev_supported_types" / spec.id
            tdir.mkdir(parents=True, exist_ok=True)
            if spec.name is not None:
                _write(tdir / "name", spec.name)
            _write(tdir / "device_api", spec.device_api)
            available = description.available(parent, spec.id)
            _write(tdir / "available_instances", str(available))
            if spec.description is not None:
                _write(tdir / "description", spec.description)
            _write(tdir / "create", "")
    for mdev in description.mdevs:
        if not mdev.active:
            continue  # only defined in libvirt: the kernel has no device
        parent = description.parent(mdev.parent)
        mdir = root / parent.sysfs_path / mdev.uuid
        mdir.mkdir(parents=True, exist_ok=True)
        _link(
            mdir / "mdev_type",
            root / parent.sysfs_path / "mdev_supported_types" / mdev.type,
        )
        _write(mdir / "remove", "")
        _link(root / "bus/mdev/devices" / mdev.uuid, mdir)
    for pf in description.pfs:
        _render_pf(pf, root)
    _render_vf_parent_gpus(description, root)
    for gpu in description.other_gpus:
        _render_other_gpu(gpu, root)
    _render_kernel(description, root)


# a datacenter GPU is a 3D controller; GRID boards' GPUs are VGA ones
CLASS_3D = "0x030200"


def _render_other_gpu(gpu: OtherGpuSpec, root: Path) -> None:
    base = root / "devices/pci0000:00"
    pf_dir = base / gpu.address
    pf_dir.mkdir(parents=True, exist_ok=True)
    _link(root / "bus/pci/devices" / gpu.address, pf_dir)
    _write(pf_dir / "vendor", gpu.vendor_id)
    _write(pf_dir / "device", gpu.product_id)
    _write(pf_dir / "class", gpu.pci_class)
    if gpu.driver:
        _bind(pf_dir, root / "bus/pci", gpu.driver)
    if gpu.total_vfs is not None:
        _write(pf_dir / "sriov_totalvfs", str(gpu.total_vfs))
        _write(pf_dir / "sriov_numvfs", str(len(gpu.vf_addresses)))
    for index, vf in enumerate(gpu.vf_addresses):
        vf_dir = base / vf
        vf_dir.mkdir(parents=True, exist_ok=True)
        _link(pf_dir / f"virtfn{index}", vf_dir)
        _link(vf_dir / "physfn", pf_dir)
        _link(root / "bus/pci/devices" / vf, vf_dir)
        _write(vf_dir / "vendor", gpu.vendor_id)
        _write(vf_dir / "device", gpu.vf_product_id or gpu.product_id)
        _write(vf_dir / "class", gpu.pci_class)
        if gpu.vf_driver:
            _bind(vf_dir, root / "bus/pci", gpu.vf_driver)


def _render_vf_parent_gpus(description: HostDescription, root: Path) -> None:
    """The GPU whose VFs are mdev parents (Ampere before kernel 6.8): its
    own device, its virtfn links and each VF's physfn."""
    vfs_of: dict[str, list[ParentSpec]] = {}
    for parent in description.parents:
        if parent.physical_function:
            vfs_of.setdefault(parent.physical_function, []).append(parent)
    for address, vfs in vfs_of.items():
        pf_dir = root / "devices/pci0000:00" / address
        pf_dir.mkdir(parents=True, exist_ok=True)
        _link(root / "bus/pci/devices" / address, pf_dir)
        _write(pf_dir / "vendor", vfs[0].vendor_id or "")
        _write(pf_dir / "device", vfs[0].product_id or "")
        _write(pf_dir / "class", CLASS_3D)
        _write(pf_dir / "sriov_totalvfs", str(len(vfs)))
        _write(pf_dir / "sriov_numvfs", str(len(vfs)))
        if vfs[0].driver:
            _bind(pf_dir, root / "bus/pci", vfs[0].driver)
        for index, vf in enumerate(vfs):
            vf_dir = root / vf.sysfs_path
            _link(pf_dir / f"virtfn{index}", vf_dir)
            _link(vf_dir / "physfn", pf_dir)


def _render_kernel(description: HostDescription, root: Path) -> None:
    """IOMMU groups and loaded modules, as the devices imply them (or as
    the description says, to show a host set up wrong)."""
    groups = {p.iommu_group for p in description.parents if p.iommu_group}
    for group in (sorted(groups) or [0]) if description.iommu else []:
        (root / "kernel/iommu_groups" / str(group) / "devices").mkdir(
            parents=True, exist_ok=True
        )
    for module in description.loaded_modules():
        (root / "module" / module).mkdir(parents=True, exist_ok=True)
    for driver, version in description.driver_versions():
        _write(root / "module" / driver / "version", version)


def _bus_of(parent: ParentSpec) -> str:
    return {"pci": "pci", "css": "css", "ap_matrix": "ap"}.get(
        parent.kind, "virtual"
    )


def _render_pf(pf: PfSpec, root: Path) -> None:
    # a card and its VFs sit in the directory of the PCIe port above it,
    # each card under its own, as on a real host (the port's address is
    # illustrative: device 1 of the bus before the card's)
    domain, bus = pf.address.split(":")[:2]
    above = f"{domain}:{max(int(bus, 16) - 1, 0):02x}"
    base = root / f"devices/pci{above}/{above}:01.0"
    pf_dir = base / pf.address
    pf_dir.mkdir(parents=True, exist_ok=True)
    _link(root / "bus/pci/devices" / pf.address, pf_dir)
    _write(pf_dir / "vendor", pf.vendor_id or "")
    _write(pf_dir / "device", pf.product_id or "")
    _write(
        pf_dir / "numa_node", str(-1 if pf.numa_node is None else pf.numa_node)
    )
    _write(pf_dir / "sriov_numvfs", str(pf.vf_count))
    _write(pf_dir / "sriov_totalvfs", str(max(pf.vf_count, 1)))
    _write(pf_dir / "class", CLASS_3D)
    if pf.driver:
        _bind(pf_dir, root / "bus/pci", pf.driver)
    for index, vf in enumerate(pf.vf_addresses):
        vf_dir = base / vf
        (vf_dir / "nvidia").mkdir(parents=True, exist_ok=True)
        _link(pf_dir / f"virtfn{index}", vf_dir)
        _link(vf_dir / "physfn", pf_dir)
        _link(root / "bus/pci/devices" / vf, vf_dir)
        _write(vf_dir / "class", CLASS_3D)
        _write(vf_dir / "vendor", pf.vendor_id or "")
        if pf.driver:
            # the VFs stay bound to NVIDIA's driver (kubevirt/kubevirt
            # pull request 16890: "the VFs are still bind to nvidia driver
            # rather the vfio-pci")
            _bind(vf_dir, root / "bus/pci", pf.driver)
        write_vf_state(vf_dir, pf, vf)


def write_vf_state(vf_dir: Path, pf: PfSpec, vf: str) -> None:
    """The two files NVIDIA's driver shows in ``<VF>/nvidia``. A VF of
    a card that has room for no type lists the header alone."""
    lines = [f"{t.id:<6}: {t.name}" for t in pf.creatable(vf)]
    text = "ID    : vGPU Name\n" + "".join(line + "\n" for line in lines)
    _write(vf_dir / "nvidia/creatable_vgpu_types", text)
    _write(vf_dir / "nvidia/current_vgpu_type", str(pf.vf_types.get(vf, 0)))


def _bind(device: Path, bus: Path, driver_name: str) -> None:
    """A device bound to a driver: linked both ways, as the kernel does,
    with the driver's ``bind`` and ``unbind`` (written to move a device
    to another driver, as libvirt's ``managed`` hostdevs do)."""
    driver = bus / "drivers" / driver_name
    driver.mkdir(parents=True, exist_ok=True)
    for name in ("bind", "unbind"):
        (driver / name).touch()
    _link(device / "driver", driver)
    _link(driver / device.name, device)


def _write(path: Path, text: str) -> None:
    path.write_text(text if text.endswith("\n") or not text else text + "\n")


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(os.path.relpath(target, link.parent))


def materialize(
    description: HostDescription, directory: Path
) -> tuple[str, Path]:
    """Write the host's libvirt XML and sysfs tree into ``directory``.

    Returns the libvirt URI (``test:///.../host.xml``) and the sysfs root.
    """
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    xml_path = directory / "host.xml"
    xml_path.write_text(render_libvirt_xml(description))
    sysfs_root = directory / "sys"
    render_sysfs(description, sysfs_root)
    return f"test://{xml_path}", sysfs_root
