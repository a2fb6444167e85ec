"""The platform's peak DRAM bandwidth from the SMBIOS Memory Device structures (type 17, DMTF
DSP0134) the kernel publishes as /sys/firmware/dmi/entries/17-N/raw (root only): each populated
device's configured speed (MT/s) times its data width (bytes), over the channels populated.

SMBIOS has no channel field. A bank locator that names the channel ("P0 CHANNEL A", AMD and many
OEM boards) groups the devices of one channel, which share its bandwidth; otherwise each populated
device counts as a channel of its own: exact with one DIMM per channel (how bandwidth-bound servers
are populated), twice the peak with two.
"""

from __future__ import annotations

import os
import re
import struct
from typing import NamedTuple

MEMORY_DEVICE = 17


class MemoryDevice(NamedTuple):
    locator: str
    bank: str
    size_mb: int  # 0: an empty slot
    data_width_bits: int
    speed_mts: int  # configured speed where given, else the rated speed; 0: unknown

    @property
    def channel(self) -> str:
        return self.bank if re.search(r"channel", self.bank, re.I) else f"{self.bank}/{self.locator}"

    @property
    def bytes_per_s(self) -> float:
        return self.speed_mts * 1e6 * self.data_width_bits / 8


def _strings(raw: bytes, length: int) -> list[str]:
    """The structure's string set: NUL-terminated strings after the formatted area, ended by a double NUL."""
    return [s.decode("ascii", "replace").strip() for s in raw[length:].split(b"\0")]


def parse_memory_device(raw: bytes) -> MemoryDevice | None:
    """One type 17 structure (header, formatted area, strings); None for another type or a short one."""
    if len(raw) < 0x17 or raw[0] != MEMORY_DEVICE:
        return None
    length = raw[1]
    strings = _strings(raw, length)

    def string(offset: int) -> str:
        index = raw[offset] if offset < length else 0
        return strings[index - 1] if 0 < index <= len(strings) else ""

    def word(offset: int) -> int | None:
        return struct.unpack_from("<H", raw, offset)[0] if offset + 2 <= length else None

    def dword(offset: int) -> int | None:
        return struct.unpack_from("<I", raw, offset)[0] if offset + 4 <= length else None

    width = word(0x0A) or 0
    size = word(0x0C) or 0
    if size == 0x7FFF:  # 32 GB or more: the extended size field, in MB
        size = (dword(0x1C) or 0) & 0x7FFFFFFF
    elif size == 0xFFFF:
        size = 0  # unknown: not counted
    elif size & 0x8000:  # in KB
        size = (size & 0x7FFF) // 1024
    speed = word(0x20) or word(0x15) or 0  # configured memory speed (2.7+), else the rated speed
    if speed == 0xFFFF:  # over 65534 MT/s: the extended fields (3.3+)
        speed = (dword(0x58) or dword(0x54) or 0) & 0x7FFFFFFF
    return MemoryDevice(string(0x10), string(0x11), size, width if width != 0xFFFF else 0, speed)


def memory_devices(sys_root: str = "/sys") -> list[MemoryDevice]:
    """Every type 17 entry the kernel publishes; raises OSError when they cannot be read."""
    base = f"{sys_root}/firmware/dmi/entries"
    devices = []
    for name in sorted(os.listdir(base)):
        if name.startswith(f"{MEMORY_DEVICE}-"):
            with open(f"{base}/{name}/raw", "rb") as f:
                device = parse_memory_device(f.read())
            if device is not None:
                devices.append(device)
    return devices


def peak_bytes_per_s(devices: list[MemoryDevice]) -> float | None:
    """Sum over the populated channels of speed x data width (the fastest device of a channel)."""
    channels: dict[str, float] = {}
    for d in devices:
        if d.size_mb and d.speed_mts and d.data_width_bits:
            channels[d.channel] = max(channels.get(d.channel, 0.0), d.bytes_per_s)
    return sum(channels.values()) or None
