#!/usr/bin/env bash
# Builds kube-apiserver, etcd, kubectl, kube-proxy, kube-controller-manager, kube-scheduler and
# kubelet from source (through the Go module proxy) into
# OUT (default bin/k8s/$K8S_VERSION). Each binary is skipped when it is already there, so a
# second run takes seconds. Called by `make controlplane`.
set -euo pipefail
K8S_VERSION=1.37.2
ETCD_VERSION=3.6.16
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../bin/k8s/$K8S_VERSION}
mkdir -p "$out"
out=$(cd "$out" && pwd)

stamp() { # the binary already reports the wanted version
	[ -x "$out/$1" ] && [ -f "$out/.$1.version" ] && [ "$(cat "$out/.$1.version")" = "$2" ]
}

build() { # name module-dir package version ldflags
	local name=$1 dir=$2 pkg=$3 version=$4 ldflags=$5
	if stamp "$name" "$version"; then
		echo "controlplane: $name $version cached in $out"
		return
	fi
	echo "controlplane: building $name $version (cold: minutes) ..."
	local start=$SECONDS
	(cd "$here/$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ldflags" -o "$out/$name.tmp" "$pkg")
	mv "$out/$name.tmp" "$out/$name"
	echo "$version" >"$out/.$name.version"
	echo "controlplane: built $name in $((SECONDS - start))s"
}

kv="-X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION"
build etcd etcd ./cmd/etcd "v$ETCD_VERSION" ""
build kube-apiserver kube ./cmd/kube-apiserver "v$K8S_VERSION" "$kv"
build kubectl kube ./cmd/kubectl "v$K8S_VERSION" "$kv"
# The data plane for the end-to-end tests (docs/dataplane.md): kube-proxy in nftables mode.
build kube-proxy kube ./cmd/kube-proxy "v$K8S_VERSION" "$kv"
# ... and the endpointslice controller, which turns Ready Pods into EndpointSlices.
build kube-controller-manager kube ./cmd/kube-controller-manager "v$K8S_VERSION" "$kv"
# The nodes of `make cluster` (docs/cluster.md): the scheduler and a kubelet per node.
build kube-scheduler kube ./cmd/kube-scheduler "v$K8S_VERSION" "$kv"
build kubelet kube ./cmd/kubelet "v$K8S_VERSION" "$kv"
