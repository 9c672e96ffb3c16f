"""Shipped captures of real hosts' tools (text), read by
:mod:`vgpu_driver.sim.captures`."""
