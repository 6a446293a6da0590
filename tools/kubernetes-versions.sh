# Sourced by the scripts that pick a Kubernetes release: reads tools/kubernetes-versions.
#   kube_versions          every tested version, oldest first
#   kube_oldest            the oldest tested version
#   kube_newest            the newest (the default everywhere)
#   kube_gates VERSION     the feature gates the driver needs on VERSION ("" for none)
KUBE_VERSIONS_FILE="$(dirname "${BASH_SOURCE[0]}")/kubernetes-versions"

kube_versions() { awk '!/^#/ && NF {print $1}' "$KUBE_VERSIONS_FILE"; }
kube_oldest() { kube_versions | head -n 1; }
kube_newest() { kube_versions | tail -n 1; }
kube_gates() {
    local gates
    gates="$(awk -v v="$1" '!/^#/ && $1 == v {print $2; found = 1} END {exit !found}' "$KUBE_VERSIONS_FILE")" ||
        { echo "Kubernetes $1 is not in $KUBE_VERSIONS_FILE ($(kube_versions | paste -sd ' '))" >&2; return 2; }
    [[ "$gates" == - ]] || printf '%s\n' "$gates"
}
