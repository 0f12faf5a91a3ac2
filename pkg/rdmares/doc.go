// Package rdmares reads the RDMA core's resource tracking: the nldev RES
// dumps (RDMA_NLDEV_CMD_RES_QP_GET, _CQ_GET, _MR_GET, _PD_GET) that
// `rdma resource show` prints, one entry per tracked object with the
// process that owns it, and sums them per netns of those processes.
//
// The kernel (drivers/infiniband/core/nldev.c, restrack.c) answers a dump
// for one device (RDMA_NLDEV_ATTR_DEV_INDEX, a device the requesting
// socket's netns sees) and gives each user object's owner as the
// requesting task's pid namespace numbers it, and no owner when that
// namespace does not hold it. Measured in the VM tier (Linux 6.12 and
// 7.3): a reader in a new pid namespace lists every QP, none with a pid.
// The caller must run in the host's pid namespace to tell pods apart.
package rdmares
