#!/usr/bin/env bash
# Build the tritonx image from deploy/docker/Dockerfile with podman, docker or buildah.
#
#   deploy/docker/build.sh                                  # "onnx python", tag tritonx:onnx-python
#   deploy/docker/build.sh --plugins "onnx python torch" --tag tritonx:torch
#   deploy/docker/build.sh --base python:3.12-slim-bookworm # a registry base instead of Debian's
#
# The script does what needs the network on the host, so the image build itself runs offline:
#   1. the base image: --base debian (the default where no registry answers) makes a minimal
#      Debian bookworm with python3 from Debian's packages (mmdebstrap), imported as
#      localhost/tritonx-base:bookworm-<recipe hash>; --base IMAGE uses IMAGE (pulled when
#      missing); --base auto (the default) pulls python:3.12-slim-bookworm and falls back to
#      debian.
#   2. the wheelhouse (a folder of its own under deploy/docker/wheelhouse/, git-ignored,
#      removed at the end): wheels of core/ and of the selected plugins, and every dependency
#      downloaded as a wheel for the base image's Python and platform, at the versions of
#      requirements-lock.txt, through the host's pip configuration (index, proxy, certificates).
#   3. the image: the Dockerfile installs the wheelhouse with --no-index into a venv and copies
#      only that venv onto the base (no compilers, no build tools, non-root user).
# Options:
#   --plugins "P ..."   onnx python torch openvino tensorflow openai redis checksum decrypt cloud
#                       (default: onnx python)
#   --tag NAME          image name (default: tritonx:<plugins joined by ->)
#   --base B            auto | debian | an image reference (default: auto)
#   --engine E          podman | docker | buildah (default: the first found, in that order)
#   --bytecode B        compiled (default: .pyc in the image, faster cold start) | none
#   --torch-index URL   where torch's CPU build comes from (default
#                       https://download.pytorch.org/whl/cpu; "none": pip's own sources only)
# Environment: PYTHON (default python3) runs pip on the host.
# Exit status: 0 built (the last line printed is the tag), 3 no base image can be had, 1 else.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$ROOT/deploy/docker"
PLUGINS="onnx python"
TAG=""
BASE="auto"
ENGINE=""
BYTECODE="compiled"
TORCH_INDEX="https://download.pytorch.org/whl/cpu"
PUBLIC_BASE="python:3.12-slim-bookworm"
PYTHON="${PYTHON:-python3}"

die() { echo "build.sh: $*" >&2; exit 1; }
# exit status 3: no base image can be had (the image tests skip on it, saying why)
no_base() { echo "build.sh: $*" >&2; exit 3; }
say() { echo "build.sh: $*" >&2; }

while [ $# -gt 0 ]; do
    case "$1" in
        --plugins|--tag|--base|--engine|--bytecode|--torch-index)
            [ $# -ge 2 ] || die "$1 needs a value (--help lists the options)" ;;
    esac
    case "$1" in
        --plugins) PLUGINS="$2"; shift 2 ;;
        --tag) TAG="$2"; shift 2 ;;
        --base) BASE="$2"; shift 2 ;;
        --engine) ENGINE="$2"; shift 2 ;;
        --bytecode) BYTECODE="$2"; shift 2 ;;
        --torch-index) TORCH_INDEX="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option '$1' (--help lists them)" ;;
    esac
done
case "$BYTECODE" in compiled|none) ;; *) die "--bytecode is compiled or none, not '$BYTECODE'" ;; esac
[ -n "$TAG" ] || TAG="tritonx:$(echo "$PLUGINS" | tr -s ' ' '-')"

# ------------------------------------------------------------------ the plugins
local_dirs=(./core)
extra=()
for plugin in $PLUGINS; do
    case "$plugin" in
        onnx) local_dirs+=(./plugins/backend_onnx) ;;
        python) local_dirs+=(./plugins/backend_python) ;;
        torch) local_dirs+=(./plugins/backend_python ./plugins/backend_torch); extra+=(torch) ;;
        openvino) local_dirs+=(./plugins/backend_openvino) ;;
        tensorflow) local_dirs+=(./plugins/backend_tensorflow) ;;
        openai) local_dirs+=(./plugins/frontend_openai) ;;
        redis) local_dirs+=(./plugins/cache_redis) ;;
        checksum) local_dirs+=(./plugins/repoagent_checksum) ;;
        decrypt) local_dirs+=(./plugins/repoagent_decrypt) ;;
        cloud) local_dirs+=("./plugins/repo_cloud[s3,gcs,azure]") ;;
        *) die "--plugins: unknown plugin '$plugin' (onnx python torch openvino tensorflow openai redis checksum decrypt cloud)" ;;
    esac
done
# shellcheck disable=SC2207
local_dirs=($(printf '%s\n' "${local_dirs[@]}" | awk '!seen[$0]++'))

# ------------------------------------------------------------------ the engine
if [ -z "$ENGINE" ]; then
    for candidate in podman docker buildah; do
        if command -v "$candidate" >/dev/null; then ENGINE="$candidate"; break; fi
    done
    [ -n "$ENGINE" ] || die "none of podman, docker or buildah is installed (Debian: apt-get install podman runc)"
fi
command -v "$ENGINE" >/dev/null || die "--engine $ENGINE: not installed"
# shellcheck source=deploy/docker/engine.sh
. "$HERE/engine.sh"
engine_setup "$ENGINE"

# ------------------------------------------------------------------ the base image
make_debian_base() {
    if engine_has "$DEBIAN_BASE"; then
        say "base: $DEBIAN_BASE (already made)"
        return
    fi
    command -v mmdebstrap >/dev/null \
        || no_base "--base debian needs mmdebstrap (Debian: apt-get install mmdebstrap)"
    local tmp
    tmp="$(mktemp -d)"
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'" EXIT
    say "base: making $DEBIAN_BASE with mmdebstrap (Debian bookworm, python3; about a minute)"
    # no documentation, manual pages or translations; no apt lists or caches in the image
    # merged /usr by mmdebstrap's hook (the usrmerge package would pull perl), no Recommends
    mmdebstrap --quiet --variant=minbase --include=python3,python3-venv \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr --aptopt='APT::Install-Recommends "false"' \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/cache/debconf/*-old "$1"/var/log/*' \
        bookworm "$tmp/base.tar" \
        || { rm -rf "$tmp"; no_base "mmdebstrap failed (it needs Debian's package mirror)"; }
    engine_import "$tmp/base.tar" "$DEBIAN_BASE" || die "importing the Debian base failed"
    rm -rf "$tmp"
    trap - EXIT
}

# the Debian base's tag names its recipe: a changed recipe makes a new base
DEBIAN_BASE="localhost/tritonx-base:bookworm-$(declare -f make_debian_base | sha256sum | cut -c1-12)"

case "$BASE" in
    debian) make_debian_base; BASE_IMAGE="$DEBIAN_BASE" ;;
    auto)
        if engine_has "$PUBLIC_BASE" || timeout 60 "$ENGINE" pull -q "$PUBLIC_BASE" >/dev/null 2>&1; then
            BASE_IMAGE="$PUBLIC_BASE"
        else
            say "base: $PUBLIC_BASE cannot be pulled here; making a Debian base instead"
            make_debian_base
            BASE_IMAGE="$DEBIAN_BASE"
        fi ;;
    *)
        engine_has "$BASE" || engine_pull "$BASE" \
            || no_base "--base $BASE: the image cannot be pulled"
        BASE_IMAGE="$BASE" ;;
esac
say "base: $BASE_IMAGE"

# the base's Python and platform: the wheels are downloaded for exactly these
info="$(engine_python "$BASE_IMAGE" -c '
import os, platform, sys
print(f"{sys.version_info[0]}.{sys.version_info[1]}", f"cp{sys.version_info[0]}{sys.version_info[1]}",
      os.confstr("CS_GNU_LIBC_VERSION").split()[1], platform.machine())')" \
    || die "the base image $BASE_IMAGE has no working python3"
read -r PY_VERSION PY_ABI GLIBC ARCH <<< "$(printf '%s\n' "$info" | tail -1)"
say "base Python $PY_VERSION ($PY_ABI), glibc $GLIBC, $ARCH"

# ------------------------------------------------------------------ the wheelhouse
# a folder of its own per build (builds may run side by side), removed when the script ends
mkdir -p "$HERE/wheelhouse"
WHEELS="$(mktemp -d "$HERE/wheelhouse/build.XXXXXXXX")"
chmod 755 "$WHEELS"
trap 'rm -rf "$WHEELS"' EXIT
requirements="$WHEELS/requirements.txt"
: > "$requirements"
say "wheels of ${local_dirs[*]}"
(cd "$ROOT" && "$PYTHON" -m pip wheel -q --no-deps -w "$WHEELS" "${local_dirs[@]%%\[*}") \
    || die "building the wheels of this checkout failed"
local_wheels=()
for dir in "${local_dirs[@]}"; do
    project="$ROOT/${dir%%\[*}/pyproject.toml"
    name="$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$project" | head -1)"
    version="$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$project" | head -1)"
    extras=""
    case "$dir" in *\[*) extras="[${dir#*\[}" ;; esac
    # name==version: the wheel just built, never a namesake from an index (the download below
    # is given the wheel files themselves)
    echo "$name$extras==$version" >> "$requirements"
    wheel="$(cd "$WHEELS" && ls "${name//-/_}-$version"-*.whl)" \
        || die "no wheel of $name $version was built"
    local_wheels+=("./$wheel$extras")
done
printf '%s\n' "${extra[@]}" >> "$requirements"

platforms=()
glibc_minor="${GLIBC#*.}"
for minor in $(seq 5 "$glibc_minor"); do platforms+=(--platform "manylinux_2_${minor}_${ARCH}"); done
platforms+=(--platform "manylinux2014_${ARCH}" --platform "manylinux2010_${ARCH}"
            --platform "manylinux1_${ARCH}" --platform "linux_${ARCH}")
index=()
if [ "${#extra[@]}" -gt 0 ] && [ "$TORCH_INDEX" != none ]; then
    if "$PYTHON" - "$TORCH_INDEX" <<'EOF'
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1] + "/torch/", timeout=10).close()
except Exception:
    sys.exit(1)
EOF
    then
        index=(--extra-index-url "$TORCH_INDEX")
    else
        say "torch: $TORCH_INDEX does not answer; taking torch from pip's own sources"
    fi
fi
say "downloading the dependencies for $PY_ABI"
(cd "$WHEELS" && "$PYTHON" -m pip download -q -d "$WHEELS" --only-binary=:all: \
    --python-version "$PY_VERSION" --implementation cp --abi "$PY_ABI" --abi abi3 --abi none \
    "${platforms[@]}" "${index[@]}" --find-links "$WHEELS" \
    -c "$ROOT/requirements-lock.txt" "${local_wheels[@]}" "${extra[@]}") \
    || die "downloading the dependencies failed (pip's output is above)"
if [ "${#extra[@]}" -gt 0 ]; then
    # a CPU image takes torch's CPU build, never a CUDA one of several GB
    torch_wheel="$(cd "$WHEELS" && ls torch-*.whl)"
    case "$torch_wheel" in
        *+cpu*) ;;
        *) die "torch: $torch_wheel is not a CPU build (give --torch-index, or a find-links folder holding torch's +cpu wheel)" ;;
    esac
    if ls "$WHEELS"/nvidia_* >/dev/null 2>&1; then die "torch: CUDA libraries were downloaded"; fi
fi

# ------------------------------------------------------------------ the image
say "building $TAG with $ENGINE"
engine_build --build-arg BASE_IMAGE="$BASE_IMAGE" --build-arg BYTECODE="$BYTECODE" \
    --build-arg WHEELHOUSE="deploy/docker/wheelhouse/$(basename "$WHEELS")" \
    --build-arg PLUGINS="$PLUGINS" -t "$TAG" -f "$HERE/Dockerfile" "$ROOT" >&2
say "built $TAG: $(engine_size "$TAG")"
echo "$TAG"
