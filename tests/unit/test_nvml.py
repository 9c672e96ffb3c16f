"""NVIDIA's management library as the source of truth for what a card
holds, read through the same reader a real host uses (the simulated
host answers pynvml's calls from captured ``nvidia-smi`` figures)."""

from __future__ import annotations

import dataclasses

import pytest

from tests import helpers
from tests.capacity_helpers import enabled, total_of
from tests.nvml_hosts import emptied, rtx_host
from vgpu_driver.host.nvml import NvmlReader
from vgpu_driver.model import health, nvml
from vgpu_driver.model.inventory import plan_providers
from vgpu_driver.sim.simulated import SimulatedHost

RTX = "pci_0001_c8_00_0"
H100 = "pci_0000_98_00_0"


@pytest.mark.parametrize(
    ("number", "nvidia_figure"),
    # 'Max Instances' of nvidia-smi vgpu -s -v on that card
    [(1518, 32), (1521, 24), (1540, 2)],
)
def test_time_sliced_totals_are_nvml_max_instances(number, nvidia_figure):
    inventory = emptied(rtx_host()).discover()
    assert inventory.nvml is not None
    assert total_of(inventory, f"nvidia-{number}", RTX) == (
        nvidia_figure,
        None,
    )


def test_a_mig_backed_type_is_not_its_max_instances():
    """DC-1-2Q reads 'Max Instances: 48' (the VF count) on a card with
    MIG off: nothing fits, and the operator is told to enable MIG."""
    inventory = emptied(rtx_host()).discover()
    gpu = inventory.nvml.gpu("0001:c8:00.0")
    assert gpu.type(1546).max_instances == 48 and gpu.type(1546).gi_profile
    assert total_of(inventory, "nvidia-1546", RTX)[0] == 0
    room, why = nvml.room(gpu, 1546, {})
    assert room == 0 and "enable MIG" in why


def test_mig_backed_room_is_the_free_gpu_instances_of_its_profile():
    host = SimulatedHost(helpers.load("h100nvl-mig"))
    # two vGPUs on instances 7 and 8 of seven: 5 free, 7 in all
    assert total_of(host.discover(), "nvidia-1130", H100) == (7, None)
    host.set_vf_type("0000:98:00.6", 1130)
    inventory = host.discover()
    assert dict(inventory.nvml.gpu("0000:98:00.0").free_instances) == {19: 4}
    assert total_of(inventory, "nvidia-1130", H100)[0] == 7
    # the time-sliced type runs on no GPU in MIG mode
    assert total_of(inventory, "nvidia-1139", H100)[0] == 0
    # without NVML: one more than in use, said
    blind = dataclasses.replace(inventory, nvml=None)
    total, why = total_of(blind, "nvidia-1130", H100)
    assert total == 4 and "MIG-backed" in why


def test_the_issue_layout_one_1g_and_three_2g_instances():
    """A MIG layout of one 1g.10gb and three 2g.20gb: 1 and 3, whatever
    Max Instances says (7 for 1g.10gb on an A100 80GB)."""
    gpu = nvml.NvmlGpu(
        "0000:17:00.0",
        types=(
            nvml.NvmlType(1, "NVIDIA A100D-1-10C", 10240, 7, gi_profile=19),
            nvml.NvmlType(2, "NVIDIA A100D-2-20C", 20480, 3, gi_profile=14),
        ),
        mig=True,
        free_instances=((19, 1), (14, 3)),
    )
    assert nvml.room(gpu, 1, {})[0] == 1
    assert nvml.room(gpu, 2, {})[0] == 3


def test_mixed_size_placed_framebuffer_comes_off():
    """DC-48Q and DC-4Q placed on a 96 GB card: 44 GB left, 11 more
    DC-4Q (NVML's Max Instances alone would say 23)."""
    host = emptied(rtx_host())
    host._state.pfs[0].mixed_size = True
    host.set_vf_type("0001:c8:00.4", 1540)
    host.set_vf_type("0001:c8:00.5", 1521)
    gpu = host.discover().nvml.gpu("0001:c8:00.0")
    assert nvml.framebuffer_mib(gpu) == 96 * 1024
    assert nvml.room(gpu, 1521, {1540: 1, 1521: 1}) == (11, None)
    assert total_of(host.discover(), "nvidia-1521", RTX)[0] == 12


def test_not_creatable_means_no_room():
    gpu = nvml.NvmlGpu(
        "0000:17:00.0",
        types=(nvml.NvmlType(5, "NVIDIA L40S-4Q", 4096, 12),),
        creatable=frozenset(),
    )
    assert nvml.room(gpu, 5, {}) == (0, None)


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("lost", "lost"),
        ("rows_pending", "rows to remap"),
        ("rows_failed", "failed to remap"),
    ],
)
def test_an_nvml_fault_reserves_the_card_until_it_clears(fault, said):
    host = rtx_host()
    host._state.pfs[0].fault = fault
    inventory = host.discover()
    why = health.unhealthy(inventory)[RTX]
    assert said in why and "0001:c8:00.0" in why
    host._state.pfs[0].fault = None
    assert health.unhealthy(host.discover()) == {}


def test_migration_trait_follows_the_capability():
    host = rtx_host()
    inventory = host.discover()
    [plan] = plan_providers("cn", enabled("nvidia-1521"), inventory, held={})
    assert "CUSTOM_VGPU_LIVE_MIGRATION" in plan.traits
    assert "CUSTOM_VGPU_HOST_NVIDIA_580_105_06" in plan.traits
    host._state.pfs[0].virtualization_caps = 0
    reader = NvmlReader(host.nvml._lib)  # a fresh start reads caps again
    host.nvml = reader
    [plan] = plan_providers(
        "cn", enabled("nvidia-1521"), host.discover(), held={}
    )
    assert "CUSTOM_VGPU_LIVE_MIGRATION" not in plan.traits


def test_an_nvml_fault_shows_in_metrics_and_audit_within_one_refresh(
    make_conf, tmp_path
):
    from prometheus_client import generate_latest

    host = rtx_host()
    driver, registry, tree = helpers.metered(make_conf, tmp_path, host)
    [plan] = driver.last_plans
    assert plan.reserved == 0
    flag = f'vgpu_driver_provider_unschedulable{{device="{RTX}"'

    def unschedulable():
        for line in generate_latest(registry).decode().splitlines():
            if line.startswith(flag):
                return float(line.rsplit(" ", 1)[1])
        return None

    host._state.pfs[0].fault = "rows_failed"
    [plan] = driver.update_provider_tree(tree, "node1")
    assert plan.reserved == plan.total and "remap" in plan.reason
    assert unschedulable() == 1
    text = generate_latest(registry).decode()
    assert 'cause="gpu_fault"' in text and f'device="{RTX}"' in text
    found = helpers.host_findings(host.discover())
    assert ("device_unhealthy", RTX) in {(f.kind, f.subject) for f in found}
    host._state.pfs[0].fault = None
    [plan] = driver.update_provider_tree(tree, "node1")
    assert plan.reserved == 0 and unschedulable() == 0


def test_an_xid_error_holds_the_gpu_until_an_hour_passes_without_one():
    host = rtx_host()
    reader = host.nvml
    now = [1000.0]
    reader.errors.clock = lambda: now[0]
    assert health.unhealthy(host.discover()) == {}
    library = reader._lib
    library.errors.append(("0001:c8:00.0", 13))  # a guest's program: not
    assert health.unhealthy(host.discover()) == {}
    library.errors.append(("0001:c8:00.0", 48))  # double-bit ECC error
    why = health.unhealthy(host.discover())[RTX]
    assert "XID 48" in why
    now[0] += reader.errors.hold - 1
    assert RTX in health.unhealthy(host.discover())
    now[0] += 1
    assert health.unhealthy(host.discover()) == {}


def test_an_older_vgpu_manager_never_takes_a_card_out_of_service():
    """An NVML without MIG-backed vGPU's call reads every type as
    time-sliced; one that cannot answer for a card leaves it to sysfs and
    the board table (the same totals), never reserved."""
    from vgpu_driver.sim.nvml_lib import NVML_ERROR_FUNCTION_NOT_FOUND

    host = emptied(rtx_host())
    library = host.nvml._lib
    library.failing["nvmlVgpuTypeGetGpuInstanceProfileId"] = (
        NVML_ERROR_FUNCTION_NOT_FOUND
    )
    gpu = host.discover().nvml.gpu("0001:c8:00.0")
    assert gpu is not None and gpu.type(1521).gi_profile is None
    assert gpu.fault is None
    library.failing["nvmlDeviceGetCreatableVgpus"] = (
        NVML_ERROR_FUNCTION_NOT_FOUND
    )
    inventory = host.discover()
    assert inventory.nvml.gpu("0001:c8:00.0") is None
    assert health.unhealthy(inventory) == {}
    assert total_of(inventory, "nvidia-1521", RTX) == (24, None)


def test_a_manager_that_cannot_say_it_mixes_sizes_is_taken_not_to():
    """The driver's capability to mix vGPU sizes on a GPU is what NVML
    says (the RTX PRO 6000's manager: it can); a manager whose NVML
    lacks the call is taken not to, and its cards are still read."""
    from vgpu_driver.sim.nvml_lib import NVML_ERROR_FUNCTION_NOT_FOUND

    assert rtx_host().discover().nvml.heterogeneous is True
    host = rtx_host()
    host.nvml._lib.failing["nvmlGetVgpuDriverCapabilities"] = (
        NVML_ERROR_FUNCTION_NOT_FOUND
    )
    said = host.discover().nvml
    assert said.heterogeneous is False
    assert said.gpu("0001:c8:00.0") is not None


def test_a_card_without_mig_is_read_as_time_sliced():
    """An L40S has no MIG: NVML refuses ``nvmlDeviceGetMigMode`` (not
    supported). Such a card is read as not in MIG mode and offers its
    time-sliced totals (here the RTX PRO 6000's NVML made to refuse)."""
    from vgpu_driver.sim.nvml_lib import NVML_ERROR_NOT_SUPPORTED

    host = emptied(rtx_host())
    host.nvml._lib.failing["nvmlDeviceGetMigMode"] = NVML_ERROR_NOT_SUPPORTED
    inventory = host.discover()
    gpu = inventory.nvml.gpu("0001:c8:00.0")
    assert gpu is not None and gpu.mig is False and gpu.fault is None
    assert total_of(inventory, "nvidia-1521", RTX) == (24, None)
    # a MIG-backed type (DC-1-2Q): none, and the operator told why
    room, why = nvml.room(gpu, 1546, {})
    assert room == 0 and "MIG is off" in why
    assert total_of(inventory, "nvidia-1546", RTX)[0] == 0


def test_nvml_says_which_size_mode_each_card_is_in():
    host = rtx_host()
    gpu = host.discover().nvml.gpu("0001:c8:00.0")
    assert gpu.mixed_size is False
    host._state.pfs[0].mixed_size = True  # nvidia-smi vgpu -shm 1
    gpu = host.discover().nvml.gpu("0001:c8:00.0")
    assert gpu.mixed_size is True
    from vgpu_driver.cmd import doctor

    found = doctor.nvml_findings(
        doctor.HostFacts(0, frozenset(), None, False, True),
        [],
        host.discover(),
    )
    assert any("mixed-size mode" in f.detail for f in found)
    library = host.nvml._lib
    library.failing["nvmlDeviceGetVgpuHeterogeneousMode"] = 13
    assert host.discover().nvml.gpu("0001:c8:00.0").mixed_size is None
