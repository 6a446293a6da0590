"""Which versions of metadata.resource.k8s.io a device metadata file carries (light: the
command line parses them before anything heavy is imported)."""

from __future__ import annotations

# The versions a metadata file can carry. By default the file is one v1beta1 document, as the
# reference driver writes it, so a workload may parse it as one JSON value. Configured with
# more (`--metadata-versions v1beta1,v1alpha1`), the file is a KEP-5304 versioned stream: one
# document per version, in the order given, and a reader takes the first it understands.
METADATA_VERSIONS = ("v1beta1", "v1alpha1")
DEFAULT_METADATA_VERSIONS = ("v1beta1",)


def parse_versions(text: str) -> tuple[str, ...]:
    """`--metadata-versions`: a comma-separated list of distinct versions, each one of
    METADATA_VERSIONS; raises ValueError saying what is wrong."""
    versions = tuple(part.strip() for part in text.split(","))
    for version in versions:
        if version not in METADATA_VERSIONS:
            raise ValueError(
                f"unknown metadata version {version!r}: use {', '.join(METADATA_VERSIONS)}"
            )
    if len(set(versions)) != len(versions):
        raise ValueError(f"metadata version listed twice in {text!r}")
    return versions
