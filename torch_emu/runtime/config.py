"""The device configuration the environment gives: device count and memory,
read the way the native runtime reads them (csrc/runtime/runtime.cpp), and the
reader of every boolean variable (as csrc/core/EmuEnv.h reads them in C++)."""

from __future__ import annotations

import os
import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)


def parse_bytes(text: str, variable: str) -> int:
    """'8589934592', '512MiB', '8G', '1.5 gb': binary (1024-based) units."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"{variable}: {text!r} is not a size (e.g. 512MiB)")
    unit = (match.group(2) or "b")[0].lower()
    return int(float(match.group(1)) * 1024 ** "bkmgt".index(unit))


def env_flag(name: str, default: bool = False) -> bool:
    """Boolean variable ``name``: 1/true/yes/on or 0/false/no/off, any case,
    spaces around ignored; ``default`` when unset or blank."""
    value = os.environ.get(name, "")
    word = value.strip().lower()
    if not word:
        return default
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name}={value!r} is not a boolean: expected 1/0, true/false, yes/no or on/off")


def device_count() -> int:
    text = os.environ.get("TORCH_EMU_DEVICE_COUNT") or "2"
    if not text.isdigit() or not 1 <= int(text) <= 16:
        raise ValueError(f"TORCH_EMU_DEVICE_COUNT: {text!r} is not a device count from 1 to 16")
    return int(text)


def device_memory() -> int:
    """Bytes per device, rounded up to a page."""
    size = parse_bytes(os.environ.get("TORCH_EMU_DEVICE_MEMORY") or "8GiB", "TORCH_EMU_DEVICE_MEMORY")
    page = os.sysconf("SC_PAGE_SIZE")
    return -(-size // page) * page
