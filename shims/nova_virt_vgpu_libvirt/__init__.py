"""``compute_driver = vgpu_libvirt.LibvirtDriver`` for a stock nova-compute.

Nova loads its compute driver as ``nova.virt.<compute_driver>`` and from
nowhere else, so vgpu-driver's wheel installs this module as
``nova.virt.vgpu_libvirt`` next to Nova's own drivers (as out-of-tree
drivers such as nova-powervm's ``powervm_ext`` did). The distribution's
``nova-compute`` (its systemd unit, kolla's image, OpenStack-Ansible's
venv) then finds the driver with nothing else changed. The driver itself
is :class:`vgpu_driver.nova.driver.LibvirtDriver`.
"""

from vgpu_driver.nova.driver import LibvirtDriver

__all__ = ["LibvirtDriver"]
