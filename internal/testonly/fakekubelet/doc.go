// Package fakekubelet serves kubelet's pod-resources v1 API on a unix socket
// from a fixed list of pods, for the integration tiers (netns and VM) and the
// benchmark, where no kubelet runs.
package fakekubelet
