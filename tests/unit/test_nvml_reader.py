"""The NVML reader and the simulated NVML it is tested on: the simulated
library held to the real pynvml and answering with the captured
figures, which cards are asked, what a steady read costs, and a host
without the library or with NVML turned off."""

from __future__ import annotations

import dataclasses

import pytest

from tests import helpers
from tests.nvml_hosts import emptied, rtx_host
from vgpu_driver.host import nvml as nvml_host
from vgpu_driver.sim.simulated import SimulatedHost


def test_a_steady_read_is_a_few_calls_per_gpu():
    host = rtx_host()
    reader = host.nvml
    host.discover()
    before = reader.calls
    reader.read(["0001:c8:00.0"])
    # handle, creatable, MIG and mixed-size modes, remapped rows per GPU,
    # and one look at the XID events: types and capabilities are read once
    assert reader.calls - before == 5 + 1


def test_no_nvml_library_here_is_said_not_raised():
    """This machine has nvidia-ml-py but no libnvidia-ml.so: the real
    loader says so and the library falls back to sysfs."""
    reader, why = nvml_host.load()
    assert reader is None and "NVML" in why
    assert nvml_host.maybe_load(False) is None


def test_bus_ids_are_spelt_as_nvml_spells_them():
    assert nvml_host.bus_id("0001:c8:00.0") == "00000001:C8:00.0"


def test_discover_shows_what_nvml_says_of_each_card(capsys):
    import json

    from vgpu_driver.cmd import main as cli

    code = cli.main(
        ["--host-description", "h100nvl-mig", "discover", "--format", "json"]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["nvml"]["driver_version"] == "550.127.06"
    [card] = data["sriov"]
    # JSON keys are strings
    assert card["nvml"]["mig"]
    assert card["nvml"]["free_instances"] == {"19": 5}
    cli.main(["--host-description", "h100nvl-mig", "discover"])
    assert "free GPU instances profile 19: 5" in capsys.readouterr().out


def test_the_simulated_nvml_is_held_to_the_real_pynvml():
    """Every function, constant and type the simulated library offers
    (so every one the reader uses) exists in NVIDIA's own pynvml, and
    each function takes as many arguments as pynvml's."""
    import inspect

    import pynvml

    from vgpu_driver.sim.nvml_lib import SimulatedNvml
    from vgpu_driver.sim.specs import NvmlSpec

    library = SimulatedNvml(NvmlSpec("580.105.06"), list)
    names = [
        n for n in dir(library) if n.startswith(("nvml", "NVML", "c_nvml"))
    ]
    assert len(names) > 20
    for name in names:
        assert hasattr(pynvml, name), name
        ours = getattr(library, name)
        if name.startswith("nvml") and callable(ours):
            theirs = inspect.signature(getattr(pynvml, name)).parameters
            assert len(inspect.signature(ours).parameters) == len(
                [p for p in theirs.values() if p.default is p.empty]
            ), name
    for constant in (
        "NVML_ERROR_GPU_IS_LOST",
        "NVML_ERROR_TIMEOUT",
        "NVML_VGPU_DRIVER_CAP_HETEROGENEOUS_MULTI_VGPU",
    ):
        assert getattr(library, constant) == getattr(pynvml, constant)
    assert library.NVML_DEVICE_MIG_ENABLE == pynvml.NVML_DEVICE_MIG_ENABLE
    assert (
        library.nvmlEventTypeXidCriticalError
        == pynvml.nvmlEventTypeXidCriticalError
    )


def test_the_simulated_nvml_answers_with_the_captured_figures():
    """The figures the rtx6000-nvml and h100nvl-mig hosts' NVML gives
    are parsed from the shipped nvidia-smi output, not copied by hand."""
    from vgpu_driver.sim import captures

    captured = captures.vgpu_types(captures.read("rtx-pro-6000-vgpu-s-v.txt"))
    assert [(t.id, t.max_instances, t.gi_profile) for t in captured] == [
        (0x5EE, 32, None),
        (0x5F1, 24, None),
        (0x604, 2, None),
        (0x60A, 48, 19),
    ]
    gpu = emptied(rtx_host()).discover().nvml.gpu("0001:c8:00.0")
    for found in captured:
        said = gpu.type(found.id)
        assert said is not None and said.name == found.name
        assert said.max_instances == found.max_instances
        assert said.framebuffer_mib == found.framebuffer_mib
        assert said.gi_profile == found.gi_profile
    instances = captures.gpu_instances(captures.read("h100-nvl-mig.txt"))
    assert sorted(instances) == [(i, 19) for i in range(7, 14)]
    host = SimulatedHost(helpers.load("h100nvl-mig"))
    assert sorted(host._state.pfs[0].gpu_instances) == sorted(instances)


def test_a_description_naming_a_capture_that_is_not_shipped_is_refused():
    import json

    from vgpu_driver.exception import HostDescriptionInvalid
    from vgpu_driver.sim import description as hostdesc

    path = hostdesc.Path(hostdesc.__file__).parent / "data/rtx6000-nvml.json"
    raw = json.loads(path.read_text())
    raw["sriov"][0]["nvml_types_from"] = "no-such-capture.txt"
    with pytest.raises(HostDescriptionInvalid, match="no-such-capture"):
        hostdesc.parse(json.dumps(raw), "test")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # its L40 (an SR-IOV PF) and four M10 GPUs; not the mlx5 card
        # (0000:3b:00.0), an mdev parent of another vendor
        (
            "demo",
            [
                "0000:41:00.0",
                "0000:84:00.0",
                "0000:85:00.0",
                "0000:86:00.0",
                "0000:87:00.0",
            ],
        ),
        ("gvtg", []),  # Intel's i915 parent: never NVML's to answer
        ("mtty", []),  # no PCI address at all
        ("a2-vf-parents", ["0000:08:00.0"]),  # 16 VF parents: their PF
    ],
)
def test_nvml_is_asked_of_nvidia_gpus_alone(name, expected):
    """The GPUs NVML is asked about are the NVIDIA GPUs the host lists,
    each once: an SR-IOV card, the GPU of an mdev parent (a VF parent's
    PF), never another vendor's parent."""
    inventory = helpers.simulated_host(name).discover()
    assert nvml_host.nvidia_gpus(inventory.parents, inventory.pfs) == expected


def test_use_nvml_off_never_loads_nvml(monkeypatch):
    """``[devices] use_nvml = False``: NVML is not even loaded; on, the
    reader loaded holds a GPU after an XID error for ``error_hold``."""
    loaded = []

    class Reader:
        errors = dataclasses.make_dataclass("E", ["hold"])(hold=None)

    def load():
        loaded.append(True)
        return Reader(), "NVML"

    monkeypatch.setattr(nvml_host, "load", load)
    assert nvml_host.maybe_load(False) is None
    assert not loaded
    reader = nvml_host.maybe_load(True, error_hold=7.0)
    assert loaded and reader.errors.hold == 7.0
