// Package e2e holds Portico's end-to-end tests: the real binaries against a real
// kube-apiserver and etcd, and (as root) speakers in network namespaces with a real BGP router.
package e2e
