// Package validate checks a conflist's rdma-chain entry strictly, as the
// plugin will parse it, and names each problem by file:line:column.
package validate
