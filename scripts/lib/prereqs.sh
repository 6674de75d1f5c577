# Shared by the scripts: installs the system packages the build needs when they are missing.
# The rocksdb crate generates its bindings with bindgen, which loads libclang at build time.

have_libclang() {
  ldconfig -p 2>/dev/null | grep -q 'libclang\(-[0-9.]*\)\?\.so' && return 0
  compgen -G '/usr/lib/llvm-*/lib/libclang.so*' >/dev/null
}

ensure_build_prereqs() {
  if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo is not installed: install Rust from https://rustup.rs first" >&2
    exit 1
  fi
  local missing=()
  have_libclang || missing+=(clang libclang-dev)
  command -v c++ >/dev/null 2>&1 || missing+=(g++)
  command -v make >/dev/null 2>&1 || missing+=(make)
  if [ ${#missing[@]} -gt 0 ]; then
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing ${missing[*]}" >&2
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
  fi
}

# ensure_command COMMAND PACKAGE: installs PACKAGE from Debian when COMMAND is missing.
ensure_command() {
  command -v "$1" >/dev/null 2>&1 && return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing $2" >&2
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "$2"
}

# ensure_pip_command COMMAND PACKAGE: installs PACKAGE from PyPI (for this user) when COMMAND is
# missing.
ensure_pip_command() {
  command -v "$1" >/dev/null 2>&1 && return 0
  ensure_command python3 python3
  python3 -m pip --version >/dev/null 2>&1 || ensure_command pip3 python3-pip
  echo "installing $2 from PyPI" >&2
  python3 -m pip install -q --user "$2" 2>/dev/null || python3 -m pip install -q --user --break-system-packages "$2"
  export PATH="$HOME/.local/bin:$PATH"
}

# ensure_postgres_server: installs Debian's PostgreSQL server programs when initdb is missing
# (the populator's end-to-end test starts its own server on loopback from them).
ensure_postgres_server() {
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null && return 0
  command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ] && return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing postgresql" >&2
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q postgresql
}
