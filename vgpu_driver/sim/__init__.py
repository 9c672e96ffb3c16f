"""Simulated hosts, built from host descriptions (JSON rebuilt from real
captured data): the in-process :class:`~vgpu_driver.sim.simulated.
SimulatedHost`, libvirt test-driver XML and a fake sysfs tree."""
