#!/usr/bin/env bash
# Installs the pinned helm v3 release that the chart's render tests run, into .tools/bin.
#
# Built from its Go module with `go install`: only the Go module proxy is reachable from the
# project's machines, so no prebuilt release archive is downloaded. Idempotent: does nothing
# when .tools/bin/helm already reports the pinned version.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.19.5}"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin_dir="${root}/.tools/bin"
helm="${bin_dir}/helm"

installed_version() {
    "${helm}" version --template '{{ .Version }}' 2>/dev/null || true
}

if [[ -x "${helm}" && "$(installed_version)" == "${HELM_VERSION}" ]]; then
    exit 0
fi

if ! command -v go >/dev/null 2>&1; then
    echo "install-helm: go is not on PATH; cannot build helm ${HELM_VERSION}" >&2
    exit 1
fi

mkdir -p "${bin_dir}"
echo "install-helm: building helm ${HELM_VERSION} from its Go module (takes a few minutes)" >&2
# The version is stamped the way helm's own Makefile does, so `helm version` reports it.
GOBIN="${bin_dir}" GOFLAGS="${GOFLAGS:-} -buildvcs=false" CGO_ENABLED=0 go install \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" \
    "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"

got="$(installed_version)"
if [[ "${got}" != "${HELM_VERSION}" ]]; then
    echo "install-helm: built helm reports version '${got}', expected ${HELM_VERSION}" >&2
    exit 1
fi
echo "install-helm: helm ${HELM_VERSION} installed in ${bin_dir}" >&2
