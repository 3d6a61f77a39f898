#!/usr/bin/env bash
# Builds a release into OUTDIR (make dist; docs/development.md, "Releases"):
#   leasehold_V_OS_ARCH.tar.gz           leasehold, README.md and CHANGELOG.md, per platform
#   terraform-provider-leasehold_V_OS_ARCH.zip, _V_SHA256SUMS, _V_manifest.json
#                                        the provider as Terraform's registry protocol serves it
#   mirror/ADDRESS/terraform-provider-leasehold_V_OS_ARCH.zip
#                                        the same zips in a filesystem mirror's packed layout
#   leasehold-client-V.tgz               the TypeScript client (npm pack)
#   leasehold_client-V-py3-none-any.whl  the Python client
#   leasehold_V_sbom.cdx.json, terraform-provider-leasehold_V_sbom.cdx.json
#                                        CycloneDX SBOMs of the Go dependencies (cyclonedx-gomod)
#   SHA256SUMS                           every file above
# V is VERSION without its v. Reproducible: the binaries are built with -trimpath, no VCS stamp
# and no build id, from the product module alone (GOWORK=off); every archive's dates are the
# commit's time (SOURCE_DATE_EPOCH) and its entries in name order. Two runs at one commit give
# the same SHA256SUMS (TestDistIsReproducible).
#   scripts/dist.sh VERSION COMMIT OUTDIR
# DIST_PLATFORMS (default "linux/amd64 linux/arm64 darwin/amd64 darwin/arm64") picks platforms.
set -euo pipefail
[[ $# -eq 3 ]] || { echo "usage: scripts/dist.sh VERSION COMMIT OUTDIR" >&2; exit 64; }
version=$1 commit=$2 out=$3
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
go=${GO:-go}
v=${version#v}
platforms=${DIST_PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 315532800)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -rf "${out:?}"/*
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

$go build -o "$work/distpack" ./internal/distpack
$go build -o "$work/cyclonedx-gomod" github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod

vpkg=github.com/leasehold/leasehold/internal/version
build() { # GOOS GOARCH OUTPUT PACKAGE LDFLAGS
  GOWORK=off CGO_ENABLED=0 GOOS=$1 GOARCH=$2 $go build -trimpath -buildvcs=false \
    -ldflags "-s -w -buildid= $5" -o "$3" "$4"
}
provider_zips=()
for platform in $platforms; do
  os=${platform%/*} arch=${platform#*/}
  dir="$work/$os-$arch"
  mkdir -p "$dir"
  build "$os" "$arch" "$dir/leasehold" ./cmd/leasehold "-X $vpkg.version=$version -X $vpkg.commit=$commit"
  build "$os" "$arch" "$dir/terraform-provider-leasehold_v$v" ./cmd/terraform-provider-leasehold "-X main.version=$v"
  "$work/distpack" -tar "$out/leasehold_${v}_${os}_${arch}.tar.gz" \
    "leasehold_${v}_${os}_${arch}/leasehold=$dir/leasehold" \
    "leasehold_${v}_${os}_${arch}/README.md=README.md" \
    "leasehold_${v}_${os}_${arch}/CHANGELOG.md=CHANGELOG.md"
  zip="terraform-provider-leasehold_${v}_${os}_${arch}.zip"
  "$work/distpack" -zip "$out/$zip" "terraform-provider-leasehold_v$v=$dir/terraform-provider-leasehold_v$v"
  provider_zips+=("$zip")
done

# The provider as a registry serves it, and as a filesystem mirror's packed layout holds it.
(cd "$out" && sha256sum "${provider_zips[@]}" >"terraform-provider-leasehold_${v}_SHA256SUMS")
printf '{\n  "version": 1,\n  "metadata": {\n    "protocol_versions": ["6.0"]\n  }\n}\n' >"$out/terraform-provider-leasehold_${v}_manifest.json"
$go build -o "$work/provider-here" ./cmd/terraform-provider-leasehold
address=$("$work/provider-here" -address)
mkdir -p "$out/mirror/$address"
for zip in "${provider_zips[@]}"; do cp "$out/$zip" "$out/mirror/$address/$zip"; done

# SBOMs of what each binary is built from: the product module's requirements.
for cmd in leasehold terraform-provider-leasehold; do
  GOWORK=off GOOS=linux GOARCH=amd64 CGO_ENABLED=0 "$work/cyclonedx-gomod" app -json -noserial -notimestamp \
    -licenses -main "cmd/$cmd" -output "$out/${cmd}_${v}_sbom.cdx.json" . 2>/dev/null
done

# The TypeScript client: npm pack of a copy whose package.json carries the version. npm packs
# what package.json's "files" names (index.js, index.d.ts) and package.json; the copy leaves out
# the type check's node_modules (its typescript) and the tests all the same.
mkdir "$work/ts"
(cd clients/typescript && tar -cf - --exclude=./node_modules --exclude=./tests .) | tar -xf - -C "$work/ts"
node -e 'const fs=require("fs"),p=process.argv[1],j=JSON.parse(fs.readFileSync(p));j.version=process.argv[2];fs.writeFileSync(p,JSON.stringify(j,null,2)+"\n")' "$work/ts/package.json" "$v"
(cd "$work/ts" && npm pack --silent --pack-destination "$out" >/dev/null)

# The Python client.
python3 scripts/build_wheel.py "$version" "$out" >/dev/null

(cd "$out" && find . -type f ! -name SHA256SUMS | sed 's|^\./||' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
echo "dist: leasehold $version ($commit) in $out"
