// Package conflist reads and edits CNI conflists as runtimes read them: a
// JSON tree that keeps byte offsets (for file:line:column messages and
// edits that keep every other byte), the rdma-chain entry's insertion and
// removal, the conf directory's networks, and the primary plugin's
// conflist. Files are never followed through a symlink.
package conflist
