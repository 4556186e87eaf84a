# Sourced by build.sh (bash): the few things build.sh asks of the container engine, for podman,
# docker and buildah alike.
#   engine_setup ENGINE           podman, docker or buildah
#   engine_has IMAGE              the image is in local storage
#   engine_pull IMAGE             pull it (quietly)
#   engine_import TAR IMAGE       a root file system tarball as an image
#   engine_python IMAGE ARGS...   run the image's python3 with ARGS, print what it prints
#   engine_build ARGS...          build from a Dockerfile (docker format: HEALTHCHECK is kept)
#   engine_size IMAGE             the image's size in bytes

# podman sets resource limits (RLIMIT_NOFILE, RLIMIT_NPROC) in every container it starts, and
# some virtual machines refuse that ("error setting rlimit type 6: operation not permitted").
# This file keeps the host's limits instead; build.sh uses it only when a first container
# fails so and CONTAINERS_CONF is not set already.
PODMAN_KEEP_RLIMITS_CONF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/podman-keep-rlimits.conf"

engine_setup() {
    case "$1" in
        podman|docker|buildah) ENGINE="$1" ;;
        *) echo "build.sh: unknown engine '$1' (podman, docker or buildah)" >&2; exit 1 ;;
    esac
}

engine_has() {
    case "$ENGINE" in
        buildah) buildah inspect --type image "$1" >/dev/null 2>&1 ;;
        *) "$ENGINE" image inspect "$1" >/dev/null 2>&1 ;;
    esac
}

engine_pull() { "$ENGINE" pull -q "$1" >/dev/null; }

engine_import() {
    case "$ENGINE" in
        buildah)
            local ctr
            ctr="$(buildah from scratch)"
            buildah add "$ctr" "$1" / >/dev/null
            buildah config --cmd /bin/sh "$ctr"
            buildah commit -q "$ctr" "$2" >/dev/null
            buildah rm "$ctr" >/dev/null ;;
        *) "$ENGINE" import "$1" "$2" >/dev/null ;;
    esac
}

engine_python() {
    local image="$1" out
    shift
    case "$ENGINE" in
        buildah)
            local ctr
            local status=0
            ctr="$(buildah from "$image")"
            buildah run "$ctr" python3 "$@" || status=$?
            buildah rm "$ctr" >/dev/null
            return "$status" ;;
        podman)
            if out="$(podman run --rm --entrypoint python3 "$image" "$@" 2>&1)"; then
                printf '%s\n' "$out"
                return
            fi
            case "$out" in
                *"error setting rlimit"*)
                    if [ -z "${CONTAINERS_CONF:-}" ]; then
                        export CONTAINERS_CONF="$PODMAN_KEEP_RLIMITS_CONF"
                        echo "build.sh: this host refuses podman's resource limits; CONTAINERS_CONF=$CONTAINERS_CONF" >&2
                        podman run --rm --entrypoint python3 "$image" "$@"
                        return
                    fi ;;
            esac
            printf '%s\n' "$out" >&2
            return 1 ;;
        docker) docker run --rm --entrypoint python3 "$image" "$@" ;;
    esac
}

engine_build() {
    local ignore
    ignore="$(dirname "$PODMAN_KEEP_RLIMITS_CONF")/Dockerfile.dockerignore"
    case "$ENGINE" in
        # --layers=false: no intermediate images kept (the wheelhouse differs per build, so
        # they would never be reused, and each is the size of the venv)
        podman) podman build --format docker --layers=false --ignorefile "$ignore" "$@" ;;
        docker) docker build "$@" ;;  # BuildKit reads Dockerfile.dockerignore beside the Dockerfile
        buildah) buildah bud --format docker --layers=false --ignorefile "$ignore" "$@" ;;
    esac
}

engine_size() {
    # human-readable ("421 MB"): buildah reports only that
    case "$ENGINE" in
        buildah) buildah images --format '{{.Size}}' "$1" | head -1 ;;
        *) echo "$(( $("$ENGINE" image inspect --format '{{.Size}}' "$1") / 1000000 )) MB" ;;
    esac
}
