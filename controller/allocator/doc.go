// Package allocator is the pure core of Portico's controller: address ranges, pools and the
// allocation of addresses to Services. It does no I/O and links no Kubernetes client (only the API
// types, through rules and the condition reasons); reconcilers translate objects into its inputs
// and its decisions back into status.
package allocator
