#!/usr/bin/env bash
# Installs the pinned helm v3 release that the chart's render tests run, into .tools/bin.
# With --skip-without-go (what `make test` passes), a machine without Go gets one line and
# exit 0: the chart tests then skip, saying helm could not be built.
#
# Built from its Go module with `go install`: only the Go module proxy is reachable from the
# project's machines, so no prebuilt release archive is downloaded. Idempotent: does nothing
# when .tools/bin/helm already reports the pinned version.
set -euo pipefail

skip_without_go=false
if [[ "${1:-}" == "--skip-without-go" ]]; then
    skip_without_go=true
fi

HELM_VERSION="${HELM_VERSION:-v3.19.5}"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin_dir="${root}/.tools/bin"
helm="${bin_dir}/helm"
# The build is kept in the cache outside the clone (tools/lib.sh), so a fresh clone copies it.
source "${root}/tools/lib.sh"
cached="$(cache_dir helm "${HELM_VERSION}")/bin/helm"

installed_version() {
    "${helm}" version --template '{{ .Version }}' 2>/dev/null || true
}

if [[ -x "${helm}" && "$(installed_version)" == "${HELM_VERSION}" ]]; then
    exit 0
fi

mkdir -p "${bin_dir}"
if cache_ready helm "${HELM_VERSION}"; then
    install -m 755 "${cached}" "${helm}"
    echo "install-helm: helm ${HELM_VERSION} copied from $(dirname "${cached}")" >&2
    exit 0
fi
if ! command -v go >/dev/null 2>&1; then
    if "${skip_without_go}"; then
        echo "install-helm: go is not on PATH; skipping helm ${HELM_VERSION} (the chart tests will be skipped)"
        exit 0
    fi
    echo "install-helm: go is not on PATH; cannot build helm ${HELM_VERSION}" >&2
    exit 1
fi

echo "install-helm: building helm ${HELM_VERSION} from its Go module (takes a few minutes)" >&2
# The version is stamped the way helm's own Makefile does, so `helm version` reports it.
mkdir -p "$(dirname "${cached}")"
GOBIN="$(dirname "${cached}")" GOFLAGS="${GOFLAGS:-} -buildvcs=false" CGO_ENABLED=0 go install \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" \
    "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"

install -m 755 "${cached}" "${helm}"
got="$(installed_version)"
if [[ "${got}" != "${HELM_VERSION}" ]]; then
    echo "install-helm: built helm reports version '${got}', expected ${HELM_VERSION}" >&2
    exit 1
fi
cache_seal helm "${HELM_VERSION}"
echo "install-helm: helm ${HELM_VERSION} installed in ${bin_dir}" >&2
