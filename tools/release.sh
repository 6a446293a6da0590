#!/usr/bin/env bash
# `make release`: everything an operator installs from, written into dist/ (or $1):
#
#   dra-driver-cpu-<chart version>.tgz         the chart, `helm package`d: appVersion the
#                                              release's, version its Semantic Versioning
#                                              spelling (tools/chart-version.py)
#   dracpu-<service>-<version>.oci.tar         each of the five images, an OCI image layout
#                                              archive (also `docker load`-able)
#   dracpu-<service>-<version>.cdx.json        each image's SBOM, CycloneDX JSON made by syft:
#                                              its Debian packages and Python distributions
#   images.txt                                 `<image> <manifest digest> <archive>` per image
#   RELEASE-NOTES.md                           the version's section of CHANGELOG.md
#   SHA256SUMS                                 of every file above, for `sha256sum -c`
#
# A $DIST already holding the release of the same inputs (images, chart, changelog, these
# tools), its files intact, is left as it is.
#
# The version is pyproject.toml's `[project] version`, the one place it is written; the chart's
# appVersion must say the same and its version the same in Semantic Versioning (a packaging
# test holds them to it). The images are
# the docker tier's (tools/tier-docker.sh images: built on its private engine, or its cached
# archive of the same build inputs), so this needs root and that tier's bootstrap. Tools are
# kept outside the clone: helm (tools/install-helm.sh), syft (tools/go-tool.sh); skopeo,
# the reader every archive is checked with, comes from apt.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
source "$HERE/lib.sh"
LOG_PREFIX=release

DIST="$(realpath -m "${1:-$ROOT/dist}")"
SERVICES=(topology allocator dra-plugin nri-plugin api)
CHART="$ROOT/helm/dra-driver-cpu"
HELM="$ROOT/.tools/bin/helm"
# The packages an SBOM lists by kind (its other components are files).
COUNT_PACKAGES='
import json, sys
purls = [c.get("purl", "") for c in json.load(open(sys.argv[1])).get("components", [])]
deb, pypi = (sum(p.startswith(f"pkg:{kind}/") for p in purls) for kind in ("deb", "pypi"))
print(f"{deb} Debian packages, {pypi} Python distributions")'

version="$(project_version)"
chart="$(chart_version)" || exit 2
say "release $version (chart $chart) into $DIST"

# What the release must agree on, before anything is built.
chart_field() { sed -n "s/^$1: *\"\{0,1\}\([^\"]*\)\"\{0,1\}$/\1/p" "$CHART/Chart.yaml"; }
[[ "$(chart_field version)" == "$chart" && "$(chart_field appVersion)" == "$version" ]] \
    || die "Chart.yaml says version $(chart_field version), appVersion $(chart_field appVersion); pyproject.toml says $version (chart $chart)"
notes="$(python3 "$HERE/release-notes.py" "$version")" || exit 2
[[ "$(id -u)" == 0 ]] || die "the images are built on the docker tier's private engine, which needs root"

if ! command -v skopeo >/dev/null; then
    say "installing skopeo from apt"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends skopeo >/dev/null \
        || die "apt-get install skopeo failed"
fi
bash "$HERE/install-helm.sh"
syft="$(bash "$HERE/go-tool.sh" syft)"

say "images (tools/tier-docker.sh images)"
bash "$HERE/tier-docker.sh" bootstrap >&2
archive="$(bash "$HERE/tier-docker.sh" images | tail -n 1)"

# The same inputs as the release already in $DIST, and its files intact: nothing to do.
inputs="$( { echo "$version $archive $(stat -c '%s %Y' "$archive") $syft"; \
    cd "$ROOT" && find "$CHART" CHANGELOG.md tools/release.sh tools/oci-archive.py \
        tools/release-notes.py tools/chart-version.py -type f -print0 | sort -z | xargs -0 sha256sum; } | sha256sum | cut -c1-16)"
if [[ "$(cat "$DIST/.inputs" 2>/dev/null)" == "$inputs" ]] \
    && (cd "$DIST" && sha256sum --quiet -c SHA256SUMS >/dev/null 2>&1); then
    say "$DIST already holds release $version of these inputs"
    exit 0
fi

rm -rf "$DIST"; mkdir -p "$DIST"
say "one OCI archive per image from $archive"
wanted=()
for svc in "${SERVICES[@]}"; do
    wanted+=("localhost/dracpu-$svc:$version=dracpu-$svc-$version.oci.tar")
done
python3 "$HERE/oci-archive.py" split "$archive" "$DIST" "${wanted[@]}" > "$DIST/split.txt"

: > "$DIST/images.txt"
while read -r file digest image; do
    # An independent reader opens each archive and must find the same manifest.
    read_digest="$(skopeo inspect --format '{{.Digest}}' "oci-archive:$DIST/$file")" \
        || die "skopeo cannot read $file as an OCI archive"
    [[ "$read_digest" == "$digest" ]] || die "$file: skopeo reads manifest $read_digest, expected $digest"
    printf '%s %s %s\n' "$image" "$digest" "$file" >> "$DIST/images.txt"
    say "$file: $image $digest ($(du -m "$DIST/$file" | cut -f1) MB)"
done < "$DIST/split.txt"
rm "$DIST/split.txt"

for svc in "${SERVICES[@]}"; do
    sbom="dracpu-$svc-$version.cdx.json"
    SYFT_CHECK_FOR_APP_UPDATE=false "$syft" scan --quiet \
        --source-name "dracpu-$svc" --source-version "$version" \
        -o "cyclonedx-json=$DIST/$sbom" "oci-archive:$DIST/dracpu-$svc-$version.oci.tar" \
        || die "syft failed on dracpu-$svc-$version.oci.tar"
    say "$sbom: $(python3 -c "$COUNT_PACKAGES" "$DIST/$sbom")"
done

say "helm package $CHART"
"$HELM" package "$CHART" --version "$chart" --app-version "$version" --destination "$DIST" >/dev/null
printf '%s\n' "$notes" > "$DIST/RELEASE-NOTES.md"

(cd "$DIST" && find . -maxdepth 1 -type f ! -name SHA256SUMS ! -name '.*' -printf '%f\n' \
    | sort | xargs sha256sum > SHA256SUMS)
printf '%s\n' "$inputs" > "$DIST/.inputs"
say "done: $(wc -l < "$DIST/SHA256SUMS") files in $DIST, $(du -sm "$DIST" | cut -f1) MB"
