"""The tree writer alone: what it keeps from pass to pass (the
configuration's traits, what it last told of each provider)."""

from __future__ import annotations

import logging

import pytest

from tests import helpers
from vgpu_driver.conf.loader import load_device_config
from vgpu_driver.model.provider_plan import ProviderPlan
from vgpu_driver.records.traits import OwnedTraits
from vgpu_driver.service.tree_writer import TreeWriter

M60 = """
    [devices]
    enabled_mdev_types = nvidia-11
"""


@pytest.fixture
def setting(make_conf):
    """A writer, the M60 host's reading, its configuration's traits and
    a tree holding the compute node."""
    conf = make_conf(M60)
    config = load_device_config(conf)
    writer = TreeWriter(OwnedTraits(None))
    inventory = helpers.simulated_host("m60").discover()
    tree = helpers.new_tree()
    root = tree.data("node1").uuid
    configured = writer.configured("OWNER_NOVA", config)
    return writer, inventory, tree, root, configured, config


def plan_of(inventory, **changes):
    parent = inventory.parents[0]
    fields = {
        "name": f"node1_{parent.name}",
        "device": parent.name,
        "type_id": "nvidia-11",
        "resource_class": "VGPU",
        "total": 16,
        "reserved": 0,
        "traits": frozenset({"CUSTOM_NVIDIA_11", "OWNER_NOVA"}),
    }
    fields.update(changes)
    return ProviderPlan(**fields)


def written(setting, plan, passes=1):
    """``plan`` written by the setting's writer in ``passes`` passes."""
    writer, inventory, tree, root, configured, _config = setting
    for _ in range(passes):
        writer.write(tree, root, plan, inventory, configured, None)


def told(caplog, text):
    return [r for r in caplog.records if text in r.getMessage()]


def test_the_configuration_traits_are_computed_once_per_configuration(
    setting, make_conf
):
    """The same configuration object and owner trait: the same traits,
    not computed again at each pass; another owner trait, or the
    configuration reloaded, computes them again."""
    writer, _inventory, _tree, _root, configured, config = setting
    assert writer.configured("OWNER_NOVA", config) is configured
    other = writer.configured("CUSTOM_OWNER_X", config)
    assert other.owner == "CUSTOM_OWNER_X"
    assert "CUSTOM_OWNER_X" in other.names
    reloaded = load_device_config(make_conf(M60))
    assert writer.configured("CUSTOM_OWNER_X", reloaded) is not other
    assert writer.configured("CUSTOM_OWNER_X", reloaded) == other


def test_a_provider_taking_no_guests_is_warned_of_once_while_it_lasts(
    setting, caplog
):
    """The same reason at every pass is one warning; the provider taking
    guests again is one line, and a reason that comes back is warned of
    again."""
    inventory = setting[1]
    caplog.set_level(logging.INFO, logger="vgpu_driver")
    down = plan_of(inventory, reserved=16, reason="nvidia is not loaded")
    written(setting, down, 3)
    assert len(told(caplog, "takes no new guests")) == 1
    written(setting, plan_of(inventory), 2)
    assert len(told(caplog, "takes guests again")) == 1
    written(setting, down)
    assert len(told(caplog, "takes no new guests")) == 2


def test_a_total_below_the_host_is_warned_of_once_and_its_end_not(
    setting, caplog
):
    """A limit is one warning while it lasts; its end is no warning (a
    provider offering what the host lists says nothing)."""
    inventory = setting[1]
    caplog.set_level(logging.INFO, logger="vgpu_driver")
    limited = plan_of(inventory, total=2, limit="the board is not known")
    written(setting, limited, 2)
    assert len(told(caplog, "what it can prove")) == 1
    written(setting, plan_of(inventory))
    assert len(told(caplog, "what it can prove")) == 1
    assert not [r for r in caplog.records if "None" in r.getMessage()]
