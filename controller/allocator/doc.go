// Package allocator is the pure core of Portico's controller: address ranges, pools and the
// allocation of addresses to Services. It has no Kubernetes or network imports; reconcilers
// translate objects into its inputs and its decisions back into status.
package allocator
