// Package metrics serves reconcile's Prometheus metrics: its own counters
// and, at scrape time, what the node has (RDMA ports and counters, records,
// the plugin's outcomes, SMC-R tables and the socket hook).
package metrics
