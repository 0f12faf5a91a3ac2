// Package inspect reads, without changing anything, what the node and its
// pods have: RDMA devices and their netns mode, SMC-R tables and the socket
// hook, each recorded attachment and whether it is still whole, the
// plugin's recent failures, and optionally one netns in detail.
package inspect
