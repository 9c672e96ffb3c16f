#!/bin/bash
# devstack plugin: nova-compute with vgpu-driver doing its vGPU and mdev
# work (compute_driver = vgpu_libvirt.LibvirtDriver, the stock
# nova-compute and its unit, as devstack runs it).

function install_vgpu_driver {
    # into the environment nova-compute runs from (devstack's venv or the
    # system's): the wheel puts nova/virt/vgpu_libvirt next to Nova
    pip_install "$VGPU_DRIVER_DIR"
}

function load_mtty {
    if [[ "$VGPU_DRIVER_LOAD_MTTY" != "True" ]] \
        || [[ ",$VGPU_DRIVER_MDEV_TYPES," != *",mtty-"* ]]; then
        return 0
    fi
    if ! sudo modprobe mtty; then
        warn $LINENO "The kernel has no mtty module (CONFIG_SAMPLE_VFIO_MDEV_MTTY): no mdev to offer"
        return 0
    fi
    # vfio_mdev gives the mdevs to guests
    sudo modprobe vfio_mdev 2>/dev/null || true
}

function configure_vgpu_driver {
    local conf=${1:-$NOVA_CPU_CONF}
    iniset "$conf" DEFAULT compute_driver vgpu_libvirt.LibvirtDriver
    iniset "$conf" devices enabled_mdev_types "$VGPU_DRIVER_MDEV_TYPES"
    local first=${VGPU_DRIVER_MDEV_TYPES%%,*}
    if [[ -n "$VGPU_DRIVER_DEVICE_ADDRESSES" ]]; then
        iniset "$conf" "mdev_$first" device_addresses \
            "$VGPU_DRIVER_DEVICE_ADDRESSES"
    fi
    iniset "$conf" "mdev_$first" mdev_class "$VGPU_DRIVER_MDEV_CLASS"
}

if is_service_enabled n-cpu; then
    if [[ "$1" == "stack" && "$2" == "install" ]]; then
        echo_summary "Installing vgpu-driver"
        install_vgpu_driver
        load_mtty
    elif [[ "$1" == "stack" && "$2" == "post-config" ]]; then
        echo_summary "Configuring nova-compute for vgpu-driver"
        configure_vgpu_driver "$NOVA_CPU_CONF"
    fi
fi
