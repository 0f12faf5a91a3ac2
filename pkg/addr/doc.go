// Package addr gives a pod-side RDMA interface its own addresses: it
// delegates to the IPAM plugin named in the plugin's conf (CNI delegation,
// CNI_IFNAME = the RDMA interface) and configures the result on that one
// interface inside the pod netns, so that RoCE GIDs exist for it.
package addr
