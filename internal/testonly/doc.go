// Package testonly is the room of the helpers that only tests and test
// tiers use: testenv (whether a tier may run, the privileged gate),
// netnstest (throwaway netns and netdevs), fakekubelet (a pod-resources
// server) and followers (how CRI-O and Multus read a result). Nothing the
// product's binaries or packages link may import them; TestProductImportsNone
// checks it.
package testonly
