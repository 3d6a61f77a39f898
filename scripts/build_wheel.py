#!/usr/bin/env python3
"""Builds the Python client (clients/python/leasehold_client) as a wheel, with the standard
library only: make dist runs it, and CI has no pip, setuptools or build to lean on.

    scripts/build_wheel.py VERSION OUTDIR

The wheel is a PEP 427 zip: the package's files, then leasehold_client-VERSION.dist-info with
METADATA, WHEEL and RECORD (each file's sha256). It is reproducible: files in name order, every
date SOURCE_DATE_EPOCH (make dist sets it to the commit's time), fixed permissions.
"""
import base64
import hashlib
import os
import pathlib
import re
import sys
import time
import zipfile

NAME = "leasehold_client"
SUMMARY = "A client of the leasehold sidecar's HTTP API: claims, keepalive streams, run()."


def pep440(version: str) -> str:
    """leasehold's semantic version as Python's packaging writes versions (PEP 440):
    0.1.0 stays; v0.1.1-dev.3+0123456789ab becomes 0.1.1.dev3+0123456789ab; any other
    pre-release becomes .dev0 with its text in the local label (0.2.0-rc.1 → 0.2.0.dev0+rc.1)."""
    core, _, build = version.removeprefix("v").partition("+")
    core, _, pre = core.partition("-")
    local = build
    m = re.fullmatch(r"dev\.(\d+)", pre)
    if m:
        core += f".dev{m.group(1)}"
    elif pre:
        core += ".dev0"
        local = ".".join(x for x in (pre, build) if x)
    local = re.sub(r"[^A-Za-z0-9.]+", ".", local).strip(".")
    return core + ("+" + local if local else "")


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 64
    version, outdir = pep440(argv[1]), pathlib.Path(argv[2])
    root = pathlib.Path(__file__).resolve().parent.parent / "clients" / "python"
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))  # 1980-01-01, zip's first day
    when = time.gmtime(max(epoch, 315532800))[:6]
    files: list[tuple[str, bytes]] = []
    for path in sorted((root / NAME).rglob("*.py")):
        files.append((path.relative_to(root).as_posix(), path.read_bytes()))
    info = f"{NAME}-{version}.dist-info"
    metadata = (
        "Metadata-Version: 2.1\n"
        f"Name: {NAME.replace('_', '-')}\n"
        f"Version: {version}\n"
        f"Summary: {SUMMARY}\n"
        "Requires-Python: >=3.10\n"
        "License: see the leasehold repository\n"
    )
    files.append((f"{info}/METADATA", metadata.encode()))
    files.append((f"{info}/WHEEL", (
        "Wheel-Version: 1.0\n"
        "Generator: leasehold scripts/build_wheel.py\n"
        "Root-Is-Purelib: true\n"
        "Tag: py3-none-any\n").encode()))
    record = ""
    for name, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{name},sha256={digest},{len(data)}\n"
    record += f"{info}/RECORD,,\n"
    files.append((f"{info}/RECORD", record.encode()))
    outdir.mkdir(parents=True, exist_ok=True)
    wheel = outdir / f"{NAME}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files:
            zi = zipfile.ZipInfo(name, date_time=when)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
    print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
