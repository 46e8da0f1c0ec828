# Where scripts/setup.sh installs the STAC checker's Python packages
# (jsonschema, referencing and pystac, pinned, from PyPI, in a virtual
# environment of their own), and how scripts/test.sh finds it (sourced by
# both). scripts/check-stac.py validates a collection and its items against
# the schemas vendored in tests/data/stac-schemas, offline.
STAC_CHECK_PACKAGES="jsonschema==4.26.0 referencing==0.37.0 pystac==1.15.2"
STAC_CHECK_VENV="${WARPLINE_STAC_VENV:-${XDG_DATA_HOME:-$HOME/.local/share}/warpline/stac-check-1}"

# The venv's python, printed if the packages are installed.
stac_check_python() {
  local py="$STAC_CHECK_VENV/bin/python"
  [ -x "$py" ] && "$py" -c 'import jsonschema, referencing, pystac' >/dev/null 2>&1 && echo "$py"
}
