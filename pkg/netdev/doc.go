// Package netdev moves an RDMA netdev between the host netns and a pod netns
// (exclusive mode) and manages ipvlan/macvlan children in a pod (shared mode).
//
// Threading: every function works on the CURRENT netns of the calling OS
// thread as "the host". The caller must therefore run on a thread that is in
// the host netns and stays there: lock the goroutine to its thread
// (runtime.LockOSThread in init() of a CNI binary, or inside ns.Do /
// netns.Do). Other netns are reached only through netlink handles bound to
// them (netlink.NewHandleAt), so the calling thread never switches netns here.
package netdev
