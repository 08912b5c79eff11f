// Package rules holds the cluster rules that the controller, the speakers and the kubectl
// plugin share: what a pool's address list means, which advertisements cover an address of
// a Service, which nodes may announce it, and the one node that answers an address over L2
// (L2EligibilityOf, the owner rule: shared addresses, preferences, node fitness and live speakers
// included). It does no I/O: the callers read the objects and act on the answers, so every
// side applies the same rule and none imports another.
package rules
