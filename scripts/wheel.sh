#!/usr/bin/env bash
# The Python wheel as a user gets it: builds it with `maturin build
# --release`, installs it into a fresh venv (numpy from PyPI), and runs the
# demo pipeline and the NDVI example there, from a folder outside the
# repository (so `import warpline` can only find the installed wheel).
# Fails unless every demo item is done and every output is a GeoTIFF.
# Prints the wheel's name, size and build time, and each run's outcome.
#
#   scripts/wheel.sh                 # the venv in a temporary folder, removed after
#   scripts/wheel.sh VENV            # the venv made (afresh) at VENV and kept, e.g.
#                                    # for the bench's mixed-pyapi scenario; a folder
#                                    # there that is not a venv is refused
#
# The wheel is left in $WARPLINE_WHEEL_DIR (default target/wheels).
# Needs what scripts/test-python.sh needs (python3 with venv, the system
# GDAL, PyPI for maturin and numpy); maturin comes from that script's venv
# ($WARPLINE_PY_VENV, default ~/.cache/warpline/venv-python). A release
# build of the extension takes several minutes of two cores the first
# time; CARGO_TARGET_DIR keeps it (default target/).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
python="${PYTHON:-python3}"

build_venv="${WARPLINE_PY_VENV:-$HOME/.cache/warpline/venv-python}"
if [ ! -x "$build_venv/bin/python" ]; then
    echo "wheel: making the venv $build_venv (for maturin)" >&2
    "$python" -m venv "$build_venv"
fi
"$build_venv/bin/pip" install -q --disable-pip-version-check maturin

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
wheels="${WARPLINE_WHEEL_DIR:-$CARGO_TARGET_DIR/wheels}"
mkdir -p "$wheels"
rm -f "$wheels"/warpline-*.whl
echo "wheel: maturin build --release (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)" >&2
start=$(date +%s)
(cd python && "$build_venv/bin/maturin" build --release --out "$wheels" >&2)
build_s=$(($(date +%s) - start))
wheel=$(ls "$wheels"/warpline-*.whl)
size=$(stat -c %s "$wheel")
echo "wheel: $(basename "$wheel"), $size bytes ($((size / 1024)) KiB), built in ${build_s}s"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
venv="${1:-$work/venv}"
if [ -e "$venv" ] && [ ! -f "$venv/pyvenv.cfg" ]; then
    echo "wheel: $venv exists and is not a venv; name a new folder or a venv to remake" >&2
    exit 2
fi
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "$wheel"
echo "wheel: installed in $venv: $("$venv/bin/pip" list --format=freeze 2>/dev/null | tr '\n' ' ')"

# Outside the repository: python/warpline (the package's sources, without
# the compiled module) must not be what `import warpline` finds.
cd "$work"
"$venv/bin/python" - "$work" "$root/examples/python/ndvi.py" <<'EOF'
import runpy
import sys
import sysconfig
from pathlib import Path

import warpline

work, example = Path(sys.argv[1]), sys.argv[2]
site = Path(sysconfig.get_paths()["purelib"]).resolve()
where = Path(warpline.__file__).resolve()
assert site in where.parents, f"warpline was imported from {where}, not the venv's {site}"
print(f"wheel: warpline {warpline.__version__} from {where.parent}, {warpline.versions()}")


def tiffs(folder: Path) -> int:
    """The GeoTIFFs in folder; fails on any other file."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    for p in files:
        head = p.read_bytes()[:4]
        assert head in (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+"), f"{p} is not a TIFF ({head!r})"
    return len(files)


report = warpline.demo(work / "demo")
items = report.items
assert items.failed == 0 and items.skipped == 0, f"the demo did not finish cleanly:\n{report}"
assert items.done == items.total > 0, f"the demo did not do every item:\n{report}"
written = tiffs(work / "demo" / "output")
assert written == items.done, f"{items.done} items done but {written} files written"
print(f"wheel: demo: {items.done} of {items.total} items done, {written} COGs written, "
      f"{report.elapsed_s:.2f} s")

ndvi = runpy.run_path(example)
report = ndvi["run"](work / "ndvi-in", work / "ndvi-out")
items = report.items
assert items.done == items.total > 0 and items.failed == 0, f"the NDVI example:\n{report}"
assert tiffs(work / "ndvi-out") == items.done
print(f"wheel: NDVI stage in numpy {__import__('numpy').__version__}: "
      f"{items.done} of {items.total} items done")
EOF
echo "wheel: ok"
