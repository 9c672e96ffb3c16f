"""Node-device XML as libvirt formats it, the samples the parsers'
tests read: an M10 parent (with a type of another vendor's and an
element no libvirt has yet, both to be passed over), an SR-IOV
physical function with everything the fast reader takes, and an
mdev."""

M10_PARENT = """
<device>
  <name>pci_0000_84_00_0</name>
  <path>/sys/devices/pci0000:80/0000:80:01.0/0000:84:00.0</path>
  <parent>pci_0000_80_01_0</parent>
  <driver><name>nvidia</name></driver>
  <capability type='pci'>
    <class>0x030000</class>
    <domain>0</domain><bus>132</bus><slot>0</slot><function>0</function>
    <product id='0x13bd'>GM107GL [Tesla M10]</product>
    <vendor id='0x10de'>NVIDIA Corporation</vendor>
    <capability type='mdev_types'>
      <type id='nvidia-35'>
        <name>GRID M10-0B</name>
        <deviceAPI>vfio-pci</deviceAPI>
        <availableInstances>16</availableInstances>
      </type>
      <type id='i915-GVTg_V5_4'>
        <deviceAPI>vfio-pci</deviceAPI>
        <availableInstances>7</availableInstances>
      </type>
    </capability>
    <iommuGroup number='40'/>
    <numa node='1'/>
    <pci-express><link validity='cap' port='0' speed='8' width='16'/></pci-express>
  </capability>
  <future-element/>
</device>
"""

# As libvirt formats a PCI parent with everything its fast reader takes:
# an SR-IOV physical function, a header type, an IOMMU group, a NUMA node
# and PCIe links.
SRIOV_PARENT = """<device>
  <name>pci_0000_41_00_0</name>
  <path>/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0</path>
  <parent>pci_0000_40_01_1</parent>
  <driver>
    <name>nvidia</name>
  </driver>
  <capability type='pci'>
    <class>0x030200</class>
    <domain>0</domain>
    <bus>65</bus>
    <slot>0</slot>
    <function>0</function>
    <product id='0x26b5' />
    <vendor id='0x10de'>NVIDIA Corporation</vendor>
    <capability type='virt_functions' maxCount='32'>
      <address domain='0x0000' bus='0x41' slot='0x00' function='0x4'/>
      <address domain='0x0000' bus='0x41' slot='0x00' function='0x5'/>
    </capability>
    <capability type='mdev_types'>
      <type id='nvidia-1155'>
        <name>NVIDIA L40-1B</name>
        <deviceAPI>vfio-pci</deviceAPI>
        <availableInstances>32</availableInstances>
      </type>
      <type id='nvidia-1156'>
        <deviceAPI>vfio-pci</deviceAPI>
        <availableInstances>16</availableInstances>
      </type>
    </capability>
    <iommuGroup number='21'>
      <address domain='0x0000' bus='0x41' slot='0x00' function='0x0'/>
    </iommuGroup>
    <numa node='1'/>
    <pci-express>
      <link validity='cap' port='0' speed='16' width='16'/>
      <link validity='sta' speed='16' width='16'/>
    </pci-express>
  </capability>
</device>
"""

MDEV_77 = """
<device>
  <name>mdev_4b20d080_1b54_4048_85b3_a6a62d165c01_0000_84_00_0</name>
  <path>/sys/devices/pci0000:80/0000:84:00.0/4b20d080-1b54-4048-85b3-a6a62d165c01</path>
  <parent>pci_0000_84_00_0</parent>
  <driver><name>vfio_mdev</name></driver>
  <capability type='mdev'>
    <type id='nvidia-35'/>
    <uuid>4b20d080-1b54-4048-85b3-a6a62d165c01</uuid>
    <parent_addr>0000:84:00.0</parent_addr>
    <iommuGroup number='12'/>
  </capability>
</device>
"""
