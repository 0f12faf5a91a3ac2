// Package install puts rdma-chain on a node: the plugin binaries into the
// runtime's CNI bin dir and the rdma-chain entry into a conflist, each
// atomically and never through a symlink.
package install
