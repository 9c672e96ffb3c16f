"""Adapters to the host: the only code that touches libvirt or sysfs."""
