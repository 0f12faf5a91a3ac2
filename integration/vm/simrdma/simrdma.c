// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * simrdma: a movable RDMA device for rdma-chain's VM test tier.
 *
 * This module is a test-only part of the kernel under test, in the spirit of
 * netdevsim: it is built in the VM tier against Debian's linux-headers-KVER,
 * loaded into the test VM and never shipped with the plugin.
 *
 * Why it exists: exclusive mode moves an RDMA device between network
 * namespaces, which the kernel's RDMA core allows only for drivers that
 * implement disassociate_ucontext (mlx4/mlx5, irdma, erdma >= 6.12, ...).
 * The soft devices a VM can have (rxe, siw) do not, so without this module
 * the real netns move, the per-netns visibility, the GID table following the
 * netdev and the refund of devices to init_net when a netns dies could not
 * be exercised on a real kernel.
 *
 * What it is: one RDMA device per netdev named by the "netdev" parameter
 * (netdev=eth0 or netdev=eth0,eth1,...; virtio-net NICs or a bond in the
 * VM), "simrdma0", "simrdma1"... in that order, each with one RoCE v2 port
 * bound to its netdev. The
 * port carries no MAD/CM capability, so ib_core's MAD, CM and SA clients
 * skip it and nothing needs working queues. Every data-path verb answers
 * -EOPNOTSUPP; the RDMA core keeps the GID table (from the netdev's
 * addresses) and the netns membership itself. disassociate_ucontext is a
 * no-op: a user context holds no resources (every verb fails first).
 *
 * pci_function=1 makes each device look like a PCI NIC's RDMA function to
 * device plugins (the Mellanox shared device plugin reads
 * /sys/bus/pci/devices/ADDR/infiniband and wants uverbs, umad and rdma_cm
 * char devices): the PCI device above the netdev becomes the RDMA device's
 * sysfs parent, user contexts can be opened (ib_uverbs creates uverbsN
 * only for drivers with alloc_ucontext) and the port is MAD-capable (ib_umad
 * creates umadN/issmN; ib_mad's own agents fail to open on it, which
 * ib_core allows a client). Off by default: the VM tier's scenarios see the
 * plain virtual device they were written for.
 */
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/pci.h>
#include <linux/rtnetlink.h>
#include <linux/version.h>
#include <net/addrconf.h>
#include <rdma/ib_addr.h>
#include <rdma/ib_mad.h>
#include <rdma/ib_verbs.h>

MODULE_DESCRIPTION("movable RDMA test device for rdma-chain's VM tests (never shipped)");
MODULE_LICENSE("Dual BSD/GPL");

#define SIMRDMA_MAX 8
static char *netdev[SIMRDMA_MAX] = { "eth0" };
static int nr_netdev = 1;
module_param_array(netdev, charp, &nr_netdev, 0444);
MODULE_PARM_DESC(netdev, "names of the init_net netdevs, one RDMA device each");
static bool pci_function;
module_param(pci_function, bool, 0444);
MODULE_PARM_DESC(pci_function, "PCI parent, user contexts and a MAD port, as device plugins expect");

/*
 * ndev: the bound netdev, held for the device's lifetime
 * (ib_device_get_netdev is not exported on 6.1). A netns move keeps the
 * reference valid; the test never removes a NIC while the module is loaded.
 */
struct simrdma_dev {
	struct ib_device ibdev;
	struct net_device *ndev;
};
struct simrdma_pd { struct ib_pd ibpd; };
struct simrdma_cq { struct ib_cq ibcq; };
struct simrdma_qp { struct ib_qp ibqp; };
struct simrdma_uctx { struct ib_ucontext ibuc; };

static struct simrdma_dev *simrdma_devs[SIMRDMA_MAX];

static struct net_device *sim_ndev(struct ib_device *ibdev)
{
	return container_of(ibdev, struct simrdma_dev, ibdev)->ndev;
}

static int sim_query_device(struct ib_device *ibdev, struct ib_device_attr *attr,
			    struct ib_udata *udata)
{
	if (udata && (udata->inlen || udata->outlen))
		return -EINVAL;
	memset(attr, 0, sizeof(*attr));
	attr->sys_image_guid = ibdev->node_guid;
	attr->vendor_id = 0xffffff;
	attr->max_mr_size = ~0ULL;
	attr->page_size_cap = PAGE_SIZE;
	attr->max_pkeys = 1;
	return 0;
}

static int sim_query_port(struct ib_device *ibdev, u32 port, struct ib_port_attr *attr)
{
	struct net_device *ndev = sim_ndev(ibdev);
	bool up = netif_running(ndev) && netif_carrier_ok(ndev);

	/* ib_query_port() zeroed attr already. */
	attr->active_mtu = iboe_get_mtu(ndev->mtu);
	attr->state = up ? IB_PORT_ACTIVE : IB_PORT_DOWN;
	attr->phys_state = up ? IB_PORT_PHYS_STATE_LINK_UP : IB_PORT_PHYS_STATE_DISABLED;
	attr->max_mtu = IB_MTU_4096;
	attr->gid_tbl_len = 32;
	attr->ip_gids = 1;
	attr->max_msg_sz = 1 << 20;
	attr->pkey_tbl_len = 1;
	attr->active_width = IB_WIDTH_1X;
	attr->active_speed = IB_SPEED_SDR;
	return 0;
}

static int sim_get_port_immutable(struct ib_device *ibdev, u32 port,
				  struct ib_port_immutable *im)
{
	struct ib_port_attr attr;
	int err = ib_query_port(ibdev, port, &attr);

	if (err)
		return err;
	im->pkey_tbl_len = attr.pkey_tbl_len;
	im->gid_tbl_len = attr.gid_tbl_len;
	/* RoCE v2 only, no CM/SA; MAD only for pci_function (umad). */
	im->core_cap_flags = RDMA_CORE_CAP_PROT_ROCE_UDP_ENCAP;
	im->max_mad_size = 0;
	if (pci_function) {
		im->core_cap_flags |= RDMA_CORE_CAP_IB_MAD;
		im->max_mad_size = IB_MGMT_MAD_SIZE;
	}
	return 0;
}

/*
 * get_netdev, as mlx5 and erdma have: the smc module learns a port's netdev
 * only through it (smc_ib.c), ib_core uses it for ib_device_get_netdev().
 */
static struct net_device *sim_get_netdev(struct ib_device *ibdev, u32 port)
{
	struct net_device *ndev = sim_ndev(ibdev);

	dev_hold(ndev);
	return ndev;
}

static int sim_query_pkey(struct ib_device *ibdev, u32 port, u16 index, u16 *pkey)
{
	if (index)
		return -EINVAL;
	*pkey = 0xffff;
	return 0;
}

static void sim_disassociate_ucontext(struct ib_ucontext *uctx) { }
static int sim_alloc_ucontext(struct ib_ucontext *uctx, struct ib_udata *udata) { return 0; }
static void sim_dealloc_ucontext(struct ib_ucontext *uctx) { }

static int sim_alloc_pd(struct ib_pd *pd, struct ib_udata *udata) { return -EOPNOTSUPP; }
static int sim_dealloc_pd(struct ib_pd *pd, struct ib_udata *udata) { return 0; }

#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 10, 0)
static int sim_create_cq(struct ib_cq *cq, const struct ib_cq_init_attr *attr,
			 struct uverbs_attr_bundle *attrs)
#else
static int sim_create_cq(struct ib_cq *cq, const struct ib_cq_init_attr *attr,
			 struct ib_udata *udata)
#endif
{
	return -EOPNOTSUPP;
}

static int sim_destroy_cq(struct ib_cq *cq, struct ib_udata *udata) { return 0; }
static int sim_poll_cq(struct ib_cq *cq, int n, struct ib_wc *wc) { return 0; }
static int sim_req_notify_cq(struct ib_cq *cq, enum ib_cq_notify_flags flags) { return -EOPNOTSUPP; }

static int sim_create_qp(struct ib_qp *qp, struct ib_qp_init_attr *attr, struct ib_udata *udata)
{
	return -EOPNOTSUPP;
}

static int sim_modify_qp(struct ib_qp *qp, struct ib_qp_attr *attr, int mask,
			 struct ib_udata *udata)
{
	return -EOPNOTSUPP;
}

static int sim_destroy_qp(struct ib_qp *qp, struct ib_udata *udata) { return 0; }

static int sim_post_send(struct ib_qp *qp, const struct ib_send_wr *wr,
			 const struct ib_send_wr **bad)
{
	*bad = wr;
	return -EOPNOTSUPP;
}

static int sim_post_recv(struct ib_qp *qp, const struct ib_recv_wr *wr,
			 const struct ib_recv_wr **bad)
{
	*bad = wr;
	return -EOPNOTSUPP;
}

static struct ib_mr *sim_get_dma_mr(struct ib_pd *pd, int access)
{
	return ERR_PTR(-EOPNOTSUPP);
}

/* Linux 6.17 added a DMA handle argument (struct ib_dmah). */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 17, 0)
static struct ib_mr *sim_reg_user_mr(struct ib_pd *pd, u64 start, u64 len, u64 virt,
				     int access, struct ib_dmah *dmah, struct ib_udata *udata)
#else
static struct ib_mr *sim_reg_user_mr(struct ib_pd *pd, u64 start, u64 len, u64 virt,
				     int access, struct ib_udata *udata)
#endif
{
	return ERR_PTR(-EOPNOTSUPP);
}

static int sim_dereg_mr(struct ib_mr *mr, struct ib_udata *udata) { return 0; }

static const struct ib_device_ops simrdma_ops = {
	.owner = THIS_MODULE,
	.driver_id = RDMA_DRIVER_UNKNOWN,
	.query_device = sim_query_device,
	.query_port = sim_query_port,
	.get_port_immutable = sim_get_port_immutable,
	.query_pkey = sim_query_pkey,
	.get_netdev = sim_get_netdev,
	.disassociate_ucontext = sim_disassociate_ucontext,
	.alloc_pd = sim_alloc_pd,
	.dealloc_pd = sim_dealloc_pd,
	.create_cq = sim_create_cq,
	.destroy_cq = sim_destroy_cq,
	.poll_cq = sim_poll_cq,
	.req_notify_cq = sim_req_notify_cq,
	.create_qp = sim_create_qp,
	.modify_qp = sim_modify_qp,
	.destroy_qp = sim_destroy_qp,
	.post_send = sim_post_send,
	.post_recv = sim_post_recv,
	.get_dma_mr = sim_get_dma_mr,
	.reg_user_mr = sim_reg_user_mr,
	.dereg_mr = sim_dereg_mr,
	INIT_RDMA_OBJ_SIZE(ib_pd, simrdma_pd, ibpd),
	INIT_RDMA_OBJ_SIZE(ib_cq, simrdma_cq, ibcq),
	INIT_RDMA_OBJ_SIZE(ib_qp, simrdma_qp, ibqp),
	INIT_RDMA_OBJ_SIZE(ib_ucontext, simrdma_uctx, ibuc),
};

static const struct ib_device_ops simrdma_user_ops = {
	.alloc_ucontext = sim_alloc_ucontext,
	.dealloc_ucontext = sim_dealloc_ucontext,
};

static void simrdma_remove(struct simrdma_dev *sdev)
{
	struct net_device *ndev = sdev->ndev;

	ib_unregister_device(&sdev->ibdev);
	ib_dealloc_device(&sdev->ibdev);
	dev_put(ndev);
}

/* pci_parent: the first PCI device above ndev (virtio-net: virtioN's parent). */
static struct device *pci_parent(struct net_device *ndev)
{
	struct device *d;

	for (d = ndev->dev.parent; d; d = d->parent)
		if (dev_is_pci(d))
			return d;
	return NULL;
}

static struct simrdma_dev *simrdma_add(const char *name)
{
	struct net_device *ndev;
	struct simrdma_dev *sdev;
	struct ib_device *ibdev;
	int err;

	ndev = dev_get_by_name(&init_net, name);
	if (!ndev) {
		pr_err("simrdma: netdev %s not found in init_net\n", name);
		return ERR_PTR(-ENODEV);
	}
	sdev = ib_alloc_device(simrdma_dev, ibdev);
	if (!sdev) {
		dev_put(ndev);
		return ERR_PTR(-ENOMEM);
	}
	sdev->ndev = ndev;
	ibdev = &sdev->ibdev;
	ibdev->node_type = RDMA_NODE_IB_CA;
	ibdev->phys_port_cnt = 1;
	ibdev->num_comp_vectors = 1;
	ibdev->local_dma_lkey = 0;
	strscpy(ibdev->node_desc, "simrdma", sizeof(ibdev->node_desc));
	/* EUI-64 of the MAC, as erdma derives its node GUID. */
	addrconf_addr_eui48((unsigned char *)&ibdev->node_guid, ndev->dev_addr);
	ib_set_device_ops(ibdev, &simrdma_ops);
	if (pci_function) {
		ib_set_device_ops(ibdev, &simrdma_user_ops);
		ibdev->dev.parent = pci_parent(ndev);
		if (!ibdev->dev.parent) {
			pr_err("simrdma: %s has no PCI device above it\n", name);
			err = -ENODEV;
			goto out_free;
		}
	}

	err = ib_device_set_netdev(ibdev, ndev, 1);
	if (err) {
		pr_err("simrdma: bind port 1 to %s: %d\n", name, err);
		goto out_free;
	}
	/* NULL DMA device: ib_core's virtual DMA (CONFIG_INFINIBAND_VIRT_DMA). */
	err = ib_register_device(ibdev, "simrdma%d", NULL);
	if (err) {
		pr_err("simrdma: ib_register_device: %d\n", err);
		goto out_free;
	}
	pr_info("simrdma: %s registered on %s\n", dev_name(&ibdev->dev), name);
	return sdev;

out_free:
	ib_dealloc_device(ibdev);
	dev_put(ndev);
	return ERR_PTR(err);
}

static int __init simrdma_init(void)
{
	int i;

	for (i = 0; i < nr_netdev; i++) {
		struct simrdma_dev *sdev = simrdma_add(netdev[i]);

		if (IS_ERR(sdev)) {
			while (--i >= 0)
				simrdma_remove(simrdma_devs[i]);
			return PTR_ERR(sdev);
		}
		simrdma_devs[i] = sdev;
	}
	return 0;
}

static void __exit simrdma_exit(void)
{
	int i;

	for (i = nr_netdev - 1; i >= 0; i--)
		simrdma_remove(simrdma_devs[i]);
}

module_init(simrdma_init);
module_exit(simrdma_exit);
