"""The effective device configuration and its validation rules."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence

from vgpu_driver.model import naming


@dataclasses.dataclass(frozen=True)
class Problem:
    """One configuration problem, naming where it is and what to do."""

    section: str
    option: str | None
    value: str | None
    message: str
    severity: str = "error"  # or "warning"

    def __str__(self) -> str:
        where = f"[{self.section}]"
        if self.option:
            where += f" {self.option}"
        if self.value is not None:
            where += f" = {self.value}"
        return f"{where}: {self.message}"


@dataclasses.dataclass(frozen=True)
class TypeConfig:
    """How one enabled mdev type is used on this host."""

    type_id: str
    resource_class: str
    addresses: tuple[str, ...]
    max_instances: int | None
    traits: tuple[str, ...]
    is_default: bool
    group: str
    # percent of what fits on a card serving several types it is offered
    card_share: int | None = None


@dataclasses.dataclass(frozen=True)
class DeviceConfig:
    types: tuple[TypeConfig, ...] = ()
    warnings: tuple[Problem, ...] = ()

    @property
    def default_type(self) -> TypeConfig | None:
        return next((t for t in self.types if t.is_default), None)

    def get(self, type_id: str) -> TypeConfig | None:
        return next((t for t in self.types if t.type_id == type_id), None)

    def resource_classes(self) -> frozenset[str]:
        return frozenset(t.resource_class for t in self.types)

    def types_for_device(
        self, keys: Sequence[str], supported: Sequence[str]
    ) -> list[TypeConfig]:
        """Every type a device is named for, in the enabled order, that it
        supports (several: an NVIDIA SR-IOV card in mixed-size mode); a
        device named for none: the default type if it supports it."""
        named = [t for t in self.types if any(k in t.addresses for k in keys)]
        if named:
            return [t for t in named if t.type_id in supported]
        default = self.type_for_parent(keys, supported)
        return [default] if default is not None else []

    def type_for_parent(
        self, keys: Sequence[str], supported: Sequence[str]
    ) -> TypeConfig | None:
        """The type a parent serves, or None.

        ``keys`` are the parent's identities (PCI address, libvirt name);
        a parent listed in some ``device_addresses`` serves that type, any
        other the default type. Either way the parent must support it.
        """
        for type_cfg in self.types:
            if any(k in type_cfg.addresses for k in keys):
                return type_cfg if type_cfg.type_id in supported else None
        default = self.default_type
        if default is not None and default.type_id in supported:
            return default
        return None


@dataclasses.dataclass
class RawType:
    """What the files say about one type, before validation."""

    type_id: str
    group: str
    device_addresses: Sequence[str] = ()
    mdev_class: str = "VGPU"
    max_instances: str | None = None
    traits: Sequence[str] = ()
    card_share: str | None = None
    read_errors: Mapping[str, str] = dataclasses.field(default_factory=dict)


def _percent(raw: str | None) -> int | None:
    """A whole percent from 1 to 100, or None (unset or not one)."""
    try:
        value = int(str(raw).strip())
    except ValueError:
        return None
    return value if 1 <= value <= 100 else None


def build_device_config(
    enabled: Sequence[str],
    raw_types: Sequence[RawType],
    stray_sections: Sequence[str] = (),
    *,
    nova: bool = False,
) -> tuple[DeviceConfig, list[Problem]]:
    """Validate what the files say; return the config and its errors.

    Every problem is collected, so an operator sees them all at once.
    Warnings travel inside the returned config. ``nova``: the files are
    nova.conf, so what Nova's own options refuse is an error here too.
    """
    errors: list[Problem] = []
    warnings: list[Problem] = []
    types: list[TypeConfig] = []
    default: str | None = None
    raw_by_id = {r.type_id: r for r in raw_types}
    for type_id in _enabled_once(enabled, warnings):
        raw = raw_by_id.get(type_id) or RawType(type_id, f"mdev_{type_id}")
        found = _Found(raw.group, errors, warnings)
        for option, reason in raw.read_errors.items():
            found.error(option, None, reason)
        addresses = _addresses(raw, found)
        resource_class = _resource_class(raw, found, nova)
        max_instances = _max_instances(raw, found)
        card_share = _card_share(raw, found)
        traits = _traits(raw, found)
        is_default = False
        if not addresses and not raw.device_addresses:
            if default is not None:
                found.warn(
                    "device_addresses",
                    None,
                    f"type {type_id} has no device_addresses and "
                    f"{default} is already the default type for "
                    f"unlisted parents; {type_id} is ignored. List its "
                    "parents to use it.",
                )
                continue
            default = type_id
            is_default = True
        if found.ok and resource_class is not None:
            types.append(
                TypeConfig(
                    type_id=type_id,
                    resource_class=resource_class,
                    addresses=tuple(addresses),
                    max_instances=max_instances,
                    traits=tuple(traits),
                    is_default=is_default,
                    group=raw.group,
                    card_share=card_share,
                )
            )

    for section in stray_sections:
        warnings.append(
            Problem(
                section,
                None,
                None,
                "section for a type that is not in [devices] "
                "enabled_mdev_types; it is ignored. Enable the type or "
                "remove the section.",
                "warning",
            )
        )
    return DeviceConfig(tuple(types), tuple(warnings)), errors


@dataclasses.dataclass
class _Found:
    """The problems of one type's section, added to everyone's; ``ok``
    until one is an error (the type is then left out)."""

    section: str
    errors: list[Problem]
    warnings: list[Problem]
    ok: bool = True

    def error(self, option: str, value: str | None, message: str) -> None:
        self.errors.append(Problem(self.section, option, value, message))
        self.ok = False

    def warn(self, option: str, value: str | None, message: str) -> None:
        self.warnings.append(
            Problem(self.section, option, value, message, "warning")
        )


def _enabled_once(
    enabled: Sequence[str], warnings: list[Problem]
) -> list[str]:
    """The enabled types in order, each once (one listed twice: a
    warning)."""
    once: list[str] = []
    for type_id in enabled:
        if type_id in once:
            warnings.append(
                Problem(
                    "devices",
                    "enabled_mdev_types",
                    type_id,
                    "listed twice; the second is ignored",
                    "warning",
                )
            )
        elif type_id:
            once.append(type_id)
    return once


def _addresses(raw: RawType, found: _Found) -> list[str]:
    """The parents named, canonical and each once."""
    addresses: list[str] = []
    spelled: dict[str, str] = {}
    for value in raw.device_addresses:
        value = value.strip()
        address = naming.canonical_device(value)
        if address is None:
            found.error(
                "device_addresses",
                value,
                "not a PCI address (DDDD:BB:SS.F, hexadecimal) nor "
                "a device name; fix the address",
            )
            continue
        # a device named for several types: an NVIDIA SR-IOV card
        # serves each (mixed-size mode); an mdev parent the first
        # (checked against the host: model/check.py)
        if address in spelled:
            found.warn(
                "device_addresses",
                value,
                f"names parent {address} again (also written "
                f"{spelled[address]!r}); list each parent once",
            )
        if address not in addresses:
            spelled[address] = value
            addresses.append(address)
    return addresses


def _resource_class(raw: RawType, found: _Found, nova: bool) -> str | None:
    resource_class = naming.resource_class_for(raw.mdev_class)
    if resource_class is None:
        found.error(
            "mdev_class",
            raw.mdev_class,
            "must be VGPU, CUSTOM_<NAME> or a name of letters, "
            "digits and underscores (it becomes CUSTOM_<NAME>)",
        )
    elif not naming.NOVA_CLASS_RE.match(raw.mdev_class.strip()):
        # Nova's own option reads VGPU or CUSTOM_<NAME> only, and
        # nova-compute stops on anything else
        (found.error if nova else found.warn)(
            "mdev_class",
            raw.mdev_class,
            f"Nova accepts only VGPU or CUSTOM_<NAME> in capitals and "
            f"will not start with this value: write {resource_class}",
        )
    return resource_class


def _max_instances(raw: RawType, found: _Found) -> int | None:
    if raw.max_instances in (None, ""):
        return None
    try:
        max_instances: int | None = int(str(raw.max_instances).strip())
    except ValueError:
        max_instances = None
    if max_instances is None or max_instances < 1:
        found.error(
            "max_instances",
            str(raw.max_instances),
            "must be a whole number of at least 1 (leave it unset for no cap)",
        )
    return max_instances


def _card_share(raw: RawType, found: _Found) -> int | None:
    card_share = _percent(raw.card_share)
    if raw.card_share not in (None, "") and card_share is None:
        found.error(
            "card_share",
            str(raw.card_share),
            "must be a whole percent from 1 to 100 (leave it unset "
            "to offer all that fits)",
        )
    return card_share


def _traits(raw: RawType, found: _Found) -> list[str]:
    traits: list[str] = []
    for trait in raw.traits:
        trait = trait.strip()
        if not trait:
            continue
        if not naming.is_valid_trait(trait):
            found.error(
                "traits",
                trait,
                "unknown trait: use a standard os-traits name or "
                "CUSTOM_<NAME> (upper case, digits, underscores)",
            )
        elif trait not in traits:
            traits.append(trait)
    return traits


CONFIG_TRAIT_PREFIX = "CUSTOM_VGPU_CONF_"


def config_traits(traits: Iterable[str]) -> set[str]:
    """The configuration traits among ``traits``: the marks of the
    configurations of this library that wrote a provider."""
    return {t for t in traits if t.startswith(CONFIG_TRAIT_PREFIX)}


def config_trait(config: DeviceConfig, owner_trait: str) -> str:
    """The trait that says which configuration wrote a provider: a digest
    of everything in it that shapes a provider (the types, their
    addresses, caps, classes and traits, and the owner trait)."""
    shape = [
        owner_trait,
        [
            [
                t.type_id,
                t.resource_class,
                sorted(t.addresses),
                t.max_instances,
                sorted(t.traits),
                t.is_default,
            ]
            for t in sorted(config.types, key=lambda t: t.type_id)
        ],
    ]
    text = json.dumps(shape, separators=(",", ":"))
    digest = hashlib.sha256(text.encode()).hexdigest()[:8].upper()
    return f"{CONFIG_TRAIT_PREFIX}{digest}"
