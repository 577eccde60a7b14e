"""Rewrite a wheel without some of its folders (and their RECORD lines), in place:

    python3 tools/slim_wheel.py WHEEL PREFIX...

For carrying a big wheel to the GPU machine (tools/gpu-wheels.sh), where a call carries 64 MiB at most."""

from __future__ import annotations

import os
import sys
import zipfile


def slim(path: str, prefixes: list[str]) -> None:
    kept = path + ".slim"
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(kept, "w", zipfile.ZIP_DEFLATED) as out:
        for item in source.infolist():
            if any(item.filename.startswith(p) for p in prefixes):
                continue
            data = source.read(item)
            if item.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines()
                data = (
                    "\n".join(x for x in lines if not any(x.startswith(p) for p in prefixes)) + "\n"
                ).encode()
            out.writestr(item, data)
    os.replace(kept, path)


if __name__ == "__main__":
    for wheel_path in sys.argv[1:2]:
        before = os.path.getsize(wheel_path)
        slim(wheel_path, sys.argv[2:])
        after = os.path.getsize(wheel_path)
        print(f"{os.path.basename(wheel_path)}: {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB")
