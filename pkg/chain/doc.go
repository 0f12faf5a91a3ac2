// Package chain implements the plugin's CNI verbs (ADD, DEL, CHECK, STATUS,
// GC) over small seams to the kernel, kubelet and the state store, so the
// flows and their rollback run in unit tests without root.
package chain
