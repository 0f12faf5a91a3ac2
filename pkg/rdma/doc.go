// Package rdma reads the kernel's RDMA state for the chained CNI plugin: the
// RDMA netns mode, the RDMA devices visible in the current netns and the
// netdev each one belongs to, and it moves RDMA devices between network
// namespaces.
//
// sysfs is read under System.SysRoot so tests run over fixture trees, and
// RDMA netlink is reached through the Netlink seam so tests run over a fake.
package rdma
