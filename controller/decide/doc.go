// Package decide is the controller's pure core: the book (the allocator and what was decided
// with it), the decisions for a Service (Service, Health), the news desk, the pools' facts and
// every condition those decisions write. No client, no context, no clock: the reconcilers in
// controller/ gather, call it and apply what it returns; its transcripts (testdata/) run in
// milliseconds with no apiserver.
package decide
