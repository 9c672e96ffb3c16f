"""Each type's share of a card in mixed-size mode (``card_share``): what
the other types' shares reserve of a provider, every unit offered
still binding when the shares add up to 100, a bad share named and
shares over 100 a warning, and where the size a share is of comes from."""

from __future__ import annotations

import pytest

from tests import helpers
from tests.mixed_size_host import (
    CARD,
    CONFIG,
    SECOND,
    mixed_card,
    mixed_host,
    planned,
)
from vgpu_driver.exception import DeviceCapacityExhausted
from vgpu_driver.model import check


@pytest.fixture
def card(make_conf, tmp_path):
    return mixed_card(make_conf, tmp_path)


def shared_card(make_conf, tmp_path, shares):
    text = CONFIG.replace(
        "device_addresses = 0001:c8:00.0\nmdev_class",
        f"device_addresses = 0001:c8:00.0\ncard_share = {shares[1]}\n"
        "mdev_class",
    ).replace(
        "[mdev_nvidia-1521]\ndevice_addresses = 0001:c8:00.0\n",
        "[mdev_nvidia-1521]\ndevice_addresses = 0001:c8:00.0\n"
        f"card_share = {shares[0]}\n",
    )
    return helpers.Node(
        make_conf, tmp_path, "rtx6000-nvml", text, mixed_host()
    )


def _share_warnings(node):
    return [
        p
        for p in check.host_problems(node.driver.config, node.host.discover())
        if p.option == "card_share"
    ]


def test_card_share_reserves_all_but_each_types_share(make_conf, tmp_path):
    """50/50 on the RTX PRO 6000 (NVML: 24 DC-4Q or 2 DC-48Q on the empty
    card): each type may hold half of its figure, 12 DC-4Q and 1 DC-48Q.
    Once a DC-48Q is placed, DC-4Q still offers its 12 (they fit beside
    it) and DC-48Q nothing more."""
    card = shared_card(make_conf, tmp_path, (50, 50))
    assert planned(card, "total", "reserved") == {
        CARD: (24, 12),
        SECOND: (2, 1),
    }
    rp = card.tree.data(f"node1_{SECOND}").uuid
    card.driver.allocate_mdevs("i1", {rp: {"resources": {"CUSTOM_DC_48Q": 1}}})
    assert planned(card, "total", "reserved") == {
        CARD: (12, 0),
        SECOND: (2, 1),  # 1 in use, 1 fits: its share is taken
    }


def test_a_share_of_a_card_serving_one_type_reserves_nothing(
    make_conf, tmp_path
):
    """card_share splits a card between its types: a card whose one
    enabled type is DC-4Q offers all 24, share or not."""
    text = (
        "[devices]\nenabled_mdev_types = nvidia-1521\n[mdev_nvidia-1521]\n"
        "device_addresses = 0001:c8:00.0\ncard_share = 50\n"
    )
    card = helpers.Node(
        make_conf, tmp_path, "rtx6000-nvml", text, mixed_host()
    )
    assert planned(card, "total", "reserved") == {CARD: (24, 0)}


def test_a_small_type_does_not_starve_a_large_ones_share(make_conf, tmp_path):
    """12 DC-4Q placed, its half of the card: DC-48Q still offers the one
    its share holds (a share of what is left would leave it nothing)."""
    card = shared_card(make_conf, tmp_path, (50, 50))
    rp = card.tree.data(f"node1_{CARD}").uuid
    for n in range(12):
        card.driver.allocate_mdevs(f"i{n}", {rp: {"resources": {"VGPU": 1}}})
    found = planned(card, "total", "reserved")
    assert found[CARD] == (24, 12)  # 12 in use, 12 more fit: none offered
    assert found[SECOND] == (1, 0)  # the one that fits beside them


@pytest.mark.parametrize(
    ("shares", "all_fit"), [((50, 50), True), ((75, 25), True), (None, False)]
)
def test_shares_adding_up_to_100_let_every_offered_unit_bind(
    make_conf, tmp_path, shares, all_fit
):
    """What one refresh offers of both types, all taken before the next
    refresh (two schedulers' picks): with shares adding up to 100 every
    bind fits; with none, a bind is refused (the race shares close)."""
    card = (
        shared_card(make_conf, tmp_path, shares)
        if shares
        else helpers.Node(
            make_conf, tmp_path, "rtx6000-nvml", CONFIG, mixed_host()
        )
    )
    offered = {
        name: (card.tree.data(f"node1_{name}").uuid, p.total - p.reserved)
        for name, p in planned(card).items()
    }
    classes = {CARD: "VGPU", SECOND: "CUSTOM_DC_48Q"}
    picks = [SECOND] * offered[SECOND][1] + [CARD] * offered[CARD][1]
    refused = 0
    for n, name in enumerate(picks):
        try:
            card.driver.allocate_mdevs(
                f"i{n}",
                {offered[name][0]: {"resources": {classes[name]: 1}}},
            )
        except DeviceCapacityExhausted:
            refused += 1
    assert (refused == 0) is all_fit
    assert len(picks) > 0


@pytest.mark.parametrize("value", ["0", "101", "half"])
def test_a_bad_card_share_is_named(make_conf, value):
    from vgpu_driver.conf.loader import load_device_config
    from vgpu_driver.exception import ConfigInvalid

    conf = make_conf(CONFIG + f"card_share = {value}\n")
    with pytest.raises(ConfigInvalid) as exc:
        load_device_config(conf)
    assert "[mdev_nvidia-1540] card_share" in str(exc.value)
    assert value in str(exc.value)


def test_shares_over_100_are_a_warning(make_conf, tmp_path):
    card = shared_card(make_conf, tmp_path, (75, 50))
    [problem] = [
        p
        for p in check.host_problems(card.driver.config, card.host.discover())
        if p.option == "card_share"
    ]
    assert problem.severity == "warning" and "125%" in str(problem)


def test_shares_one_over_100_are_a_warning_of_the_first_type(
    make_conf, tmp_path
):
    """101% is over the card; the warning is given in the group of the
    type listed first, which the operator reads first."""
    card = shared_card(make_conf, tmp_path, (50, 51))
    [problem] = _share_warnings(card)
    assert "101%" in str(problem)
    assert problem.section == "mdev_nvidia-1521"


def test_a_share_beside_a_type_without_one_counts_that_type_whole(
    make_conf, tmp_path
):
    """One type given a share, the other none: the one without counts as
    the whole card (100), so 60 and it add up to 160%."""
    text = CONFIG.replace(
        "[mdev_nvidia-1521]\ndevice_addresses = 0001:c8:00.0\n",
        "[mdev_nvidia-1521]\ndevice_addresses = 0001:c8:00.0\n"
        "card_share = 60\n",
    )
    node = helpers.Node(
        make_conf, tmp_path, "rtx6000-nvml", text, mixed_host()
    )
    [problem] = _share_warnings(node)
    assert "160%" in str(problem) and problem.severity == "warning"


def test_shares_up_to_100_or_none_set_are_no_warning(
    make_conf, tmp_path, card
):
    """Shares adding up to exactly 100 are what the warning asks for;
    two types with no share set at all are the card's default mode
    (each offers what fits), not a share of 200%."""
    shared = shared_card(make_conf, tmp_path / "shared", (50, 50))
    assert _share_warnings(shared) == []
    assert _share_warnings(card) == []


def test_what_a_share_is_of_comes_from_nvml_or_the_board_table():
    """Without NVML, the board table and each type's size say what the
    empty card holds (at most 32 time-sliced vGPUs); NVML's Max
    Instances, when read; never a MIG-backed type (DC-1-2Q)."""
    from vgpu_driver.model import capacity

    inventory = mixed_host().discover()
    [pf] = inventory.pfs
    table = capacity.card_max(pf)
    assert (table["nvidia-1521"], table["nvidia-1540"]) == (24, 2)
    assert table["nvidia-1518"] == 32  # DC-2B: 48 by size, 32 time-sliced
    assert "nvidia-1546" not in table  # DC-1-2Q is MIG-backed
    said = capacity.card_max(pf, inventory.nvml.gpu(pf.address))
    assert (said["nvidia-1521"], said["nvidia-1540"]) == (24, 2)
    assert "nvidia-1546" not in said


def test_a_share_of_a_card_of_unknown_size_is_of_what_still_fits():
    """Where what the empty card holds of a type is unknown (no NVML, a
    board not in the table), a share is its percent of the room left;
    where it is known, its percent of that less what the type holds."""
    from collections import Counter

    from vgpu_driver.model import trait
    from vgpu_driver.model.plan_devices import Device

    card = Device(
        name=CARD,
        keys=(CARD,),
        supported=("nvidia-1521", "nvidia-1540"),
        existing=Counter(),
        available={"nvidia-1521": 10, "nvidia-1540": 0},
        capabilities=lambda _type_id: trait.NOTHING_KNOWN,
        several=True,
        card_max={"nvidia-1518": 32},
    )
    assert card.share("nvidia-1521", 50, used=3) == 5
    assert card.share("nvidia-1540", 100, used=0) == 0
    assert card.share("nvidia-1518", 50, used=3) == 13
    assert card.share("nvidia-1518", 50, used=20) == 0
    assert card.share("nvidia-9", 100, used=0) == 0  # neither: no room


def test_a_type_full_within_its_share_reserves_nothing_more(
    make_conf, tmp_path
):
    """Shares of 100 each, both DC-48Q of the card placed: the type is
    full (its total is what is in use) and its share is spent; it has
    nothing free, so nothing of it is reserved (a reservation there would
    count a unit the card does not have)."""
    card = shared_card(make_conf, tmp_path, (100, 100))
    rp = card.tree.data(f"node1_{SECOND}").uuid
    for n in range(2):
        card.driver.allocate_mdevs(
            f"i{n}", {rp: {"resources": {"CUSTOM_DC_48Q": 1}}}
        )
    assert planned(card, "total", "reserved") == {CARD: (0, 0), SECOND: (2, 0)}
