"""Virtual GPUs and mediated devices for a libvirt compute host."""
