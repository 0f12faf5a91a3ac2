// Package testonly is the room of the helpers that only tests and test
// tiers use: testenv (whether a tier may run, the privileged gate),
// netnstest (throwaway netns and netdevs), fakekubelet (a pod-resources
// server), followers (how CRI-O and Multus read a result) and leakcheck
// (a test binary leaves the machine as it found it). Nothing the
// product's binaries or packages link may import them; TestProductImportsNone
// checks it.
package testonly
