// Package controller holds Portico's reconcilers: they read Services, pools and the speakers'
// reports, ask the pure core (package decide, over package allocator) for decisions and write
// status back.
package controller
