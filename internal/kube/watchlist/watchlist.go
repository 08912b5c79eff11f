// Package watchlist turns client-go's streamed initial list off for a process's informers.
// Its own package, so the speaker can use it without linking what package kube links.
package watchlist

import (
	"os"

	clientfeatures "k8s.io/client-go/features"
)

// Off turns off client-go's streamed initial list (the WatchListClient feature, on by default
// since client-go 1.35) and leaves every other feature as it was, unless
// KUBE_FEATURE_WatchListClient is set in the environment.
//
// A streamed list ends only when the apiserver's watch cache has caught up with etcd, and a
// fresh controller's caches took 1.1 s to sync against 1000 Services with it, 0.2 s without
// (apiserver 1.37): a second more before a new leader's first address, or a restarted
// speaker's first answer. What streaming saves is the apiserver's memory for very large lists,
// which Portico's objects are not.
func Off() {
	if _, set := os.LookupEnv("KUBE_FEATURE_WatchListClient"); !set {
		clientfeatures.ReplaceFeatureGates(listThenWatch{clientfeatures.FeatureGates()})
	}
}

type listThenWatch struct{ clientfeatures.Gates }

func (g listThenWatch) Enabled(f clientfeatures.Feature) bool {
	return f != clientfeatures.WatchListClient && g.Gates.Enabled(f)
}
