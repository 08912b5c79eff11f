// Package status makes what a node's Speaker status says of its plan: the announcements (L2,
// then BGP), the routes listed in status.bgp (each by one node), the problems and Ready. A View
// keeps the entries between changes, so a change rewrites the entries it touched, and the lists
// are made only when the status is written, at most once per WritePause. It writes nothing
// itself: the speaker's status writer does.
package status
