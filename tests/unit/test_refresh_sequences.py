"""A service's refreshes through random sequences of what happens on a
compute host: binds and releases, guests defined and undefined by the
caller (Nova's) and by hand (outside Nova), mdevs another manager makes
and removes. After each refresh that planned only the parents the host
said changed, a refresh that plans the whole host finds the same
providers; and no bind hands out an mdev another manager made, a guest
uses or another bind has."""

from __future__ import annotations

import random
import uuid

import pytest

from tests.random_host import RandomHost, tree_figures, view_agrees


@pytest.mark.parametrize(
    ("seed", "making"), [(s, False) for s in range(4)] + [(4, True), (5, True)]
)
def test_a_refresh_of_the_parents_changed_is_a_refresh_of_the_host(
    tmp_path, seed, making
):
    """``making``: each bind makes its mdev and each release removes it
    (a refresh after a spawn or a delete sees a device and a guest
    change at once)."""
    rng = random.Random(seed)
    host = RandomHost(rng, tmp_path, making)
    driver, tree = host.driver, host.service.tree
    happenings = host.happenings()
    compared = 0
    for _step in range(60):
        happening = rng.choice(happenings)
        happening()
        if rng.random() < 0.25:  # several changes between two refreshes
            continue
        driver.update_provider_tree(tree, "bench")
        if rng.random() < 0.3:  # several refreshes between comparisons
            continue
        plans, providers = list(driver.last_plans), tree_figures(tree)
        view_agrees(driver)
        driver._refresher._fingerprint = None  # plan the whole host
        driver.update_provider_tree(tree, "bench")
        assert driver.last_plans == plans
        assert tree_figures(tree) == providers
        compared += 1
    assert compared > 10
    assert set(host.done) >= {"make", "gone", "bind", "define", "release"}


def test_a_spawn_failed_before_its_guest_leaves_no_mdev_removed_free(
    tmp_path, caplog
):
    """``remove_unused_mdevs``: a bind made an mdev, a refresh followed
    its parent (the mdev claimed, in no guest yet), the spawn failed and
    Nova released the instance (the mdev removed). The next bind on that
    parent makes one again: it does not hand out the mdev removed (it
    failed on a bare KeyError)."""
    host = RandomHost(random.Random(0), tmp_path, making=True)
    driver, tree = host.driver, host.service.tree
    plan = next(p for p in driver.last_plans if p.total > p.reserved)
    provider = tree.data(plan.name).uuid
    wanted = {provider: {"resources": {plan.resource_class: 1}}}
    instance = str(uuid.uuid4())
    [made] = driver.allocate_mdevs(instance, wanted)
    assert made.created
    driver.update_provider_tree(tree, "bench")
    driver.release_mdevs(instance)  # no reading between: the next bind
    assert made.id not in driver.free_mdevs()
    [again] = driver.allocate_mdevs(str(uuid.uuid4()), wanted)
    assert again.created and again.id != made.id
    assert "vanished" not in caplog.text  # not even chosen, then dropped
