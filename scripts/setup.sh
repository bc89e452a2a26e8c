#!/usr/bin/env bash
# One idempotent setup for `make run` and `make test`: distro packages (BCC included), kernel headers
# (the running kernel's, else the distro's nearest generic ones, linked), tracefs/debugfs, and a venv
# made from the system Python so the distro's `bcc` imports. A second run does nothing, quickly.
# Root (or `sudo -n`) is needed only for what is missing: as any other user, with everything in place,
# it checks and says "ready"; what it would have to install it names, with the command that does it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV="$ROOT/.venv"
SYS_PY=/usr/bin/python3
say()  { echo "setup: $*"; }
warn() { echo "setup: WARNING: $*" >&2; }

# root here: we are root, or sudo runs without a password; otherwise what needs root is named instead
if [ "$(id -u)" = 0 ]; then ROOT_BY=(); elif sudo -n true 2>/dev/null; then ROOT_BY=(sudo -n); else ROOT_BY=(none); fi
can_root() { [ "${ROOT_BY[*]}" != none ]; }
as_root() { "${ROOT_BY[@]}" "$@"; }
needs_root() { echo "setup: $1 needs root: run \`sudo make setup\` once (or $2)" >&2; }

# --- distro packages -------------------------------------------------------------------------------
wanted=$(grep -hv '^\s*#' scripts/apt-packages.txt | awk 'NF{print $1}' | sort -u)
missing=()
for p in $wanted; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
required=$(sed -n '/^# required/,/^# optional/p' scripts/apt-packages.txt | grep -v '^\s*#' | awk 'NF{print $1}')
if [ ${#missing[@]} -gt 0 ] && ! can_root; then
  # as a user: the profiler's own packages missing is the end; the tests' and benchmarks' only a warning
  lacking=$(printf '%s\n' "${missing[@]}" | grep -xF "$required" || true)
  if [ -n "$lacking" ]; then
    needs_root "installing $(echo $lacking)" "sudo apt-get install $(echo $lacking)"; exit 1
  fi
  warn "not installed (for tests or benchmarks only; installing needs root): ${missing[*]}"
  missing=()
fi
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  if ! as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
    # A name this distro lacks (Ubuntu names some differently) must not block the rest: install one
    # by one, and stop only when a package the profiler itself needs is missing.
    for p in "${missing[@]}"; do
      as_root apt-get install -y -qq --no-install-recommends "$p" >/dev/null 2>&1 && continue
      if grep -qx "$p" <<<"$required"; then
        echo "setup: cannot install $p, which the profiler needs" >&2; exit 1
      fi
      warn "could not install $p (used by tests or benchmarks only)"
    done
  fi
fi

# --- kernel headers ----------------------------------------------------------------------------------
KREL=$(uname -r)
MODDIR=/lib/modules/$KREL
if [ ! -e "$MODDIR/build/Makefile" ] && ! can_root; then
  # only the metrics (run as root) compile against them: a user's setup goes on without
  warn "no kernel headers in $MODDIR/build: the metrics cannot compile until \`sudo make setup\` installs them"
elif [ ! -e "$MODDIR/build/Makefile" ]; then
  if apt-cache show "linux-headers-$KREL" >/dev/null 2>&1; then
    say "installing linux-headers-$KREL"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "linux-headers-$KREL" >/dev/null
  fi
fi
if [ ! -e "$MODDIR/build/Makefile" ]; then
  arch=$(dpkg --print-architecture)
  generic=$(ls -d /usr/src/linux-headers-*-"$arch" 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -z "$generic" ]; then
    say "installing the distro's generic headers (linux-headers-$arch)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "linux-headers-$arch" >/dev/null
    generic=$(ls -d /usr/src/linux-headers-*-"$arch" 2>/dev/null | sort -V | tail -n 1)
  fi
  common=${generic%-"$arch"}-common
  as_root mkdir -p "$MODDIR"
  as_root ln -sfn "$generic" "$MODDIR/build"
  [ -d "$common" ] && as_root ln -sfn "$common" "$MODDIR/source"
fi
if [ -e "$MODDIR/build/Makefile" ] && [ "$(basename "$(readlink -f "$MODDIR/build")")" != "linux-headers-$KREL" ]; then
  warn "no headers for kernel $KREL; linked $(readlink "$MODDIR/build") instead."
  warn "struct layouts in those headers do not match this kernel: only tracepoint-based probes are trustworthy."
fi

# --- tracefs / debugfs -------------------------------------------------------------------------------
# asked of the mount table: a user cannot look inside them (0700), so their contents tell nothing
for fs in tracefs:/sys/kernel/tracing debugfs:/sys/kernel/debug; do
  type=${fs%%:*} dir=${fs#*:}
  mountpoint -q "$dir" && continue
  if can_root; then
    as_root mount -t "$type" "$type" "$dir" 2>/dev/null || warn "could not mount $type on $dir"
  else
    warn "$type is not mounted on $dir: the metrics need it; mounting it needs root (\`sudo make setup\`)"
  fi
done

# --- virtualenv --------------------------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV from $SYS_PY (with system site-packages, for the distro's bcc)"
  "$SYS_PY" -m venv --system-site-packages "$VENV"
fi
stamp="$VENV/.requirements.sha256"
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing requirements.txt into the venv"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt
  echo "$want" >"$stamp"
fi

# --- npm packages (collector/vendor/package.json, pinned by its lock): speedscope, whose file-format
# schema the export tests validate against; nothing is fetched at run time --------------------------
VENDOR="$ROOT/collector/vendor"
npm_stamp="$VENDOR/node_modules/.lock.sha256"
npm_want=$(sha256sum "$VENDOR/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$npm_stamp" 2>/dev/null)" != "$npm_want" ]; then
  if ! command -v npm >/dev/null && ! can_root; then
    needs_root "installing npm (for collector/vendor's packages)" "sudo apt-get install npm"; exit 1
  elif ! command -v npm >/dev/null; then
    say "installing npm"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null
  fi
  say "installing collector/vendor's npm packages"
  npm ci --prefix "$VENDOR" --no-audit --no-fund --loglevel=error >/dev/null
  echo "$npm_want" >"$npm_stamp"
fi

# --- optional extras that other parts add (PostgreSQL for tests, browser, ...) ----------------------
for extra in scripts/setup.d/*.sh; do
  [ -e "$extra" ] && bash "$extra"
done
"$VENV/bin/python" -c 'import bcc' || { echo "setup: bcc does not import in $VENV" >&2; exit 1; }
say "ready"
