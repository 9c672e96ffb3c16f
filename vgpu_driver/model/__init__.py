"""Pure model: data and rules, no I/O.

Nothing in this package imports libvirt, the os module, or an OpenStack
client; it only uses the constant tables of os-traits and
os-resource-classes.
"""
