// Package smc is a pure Go client for the kernel's SMC generic netlink
// families: SMC_PNETID (the SMC-R pnet table, net/smc/smc_pnet.c) and
// SMC_GEN_NETLINK (UEIDs, fallback statistics and SMC-R devices,
// net/smc/smc_netlink.c). It never executes smc-tools.
//
// Which netns a Client must be opened in:
//   - pnet IB entries (IBName/IBPort) exist only in init_net; an ADD of an
//     IB entry elsewhere is silently ignored by the kernel (EEXIST when no
//     ETHNAME is given).
//   - pnet ETH entries live in the table of the netns that holds the netdev
//     (the pod netns for a pod's eth0); the kernel flushes that table when
//     the netns exits.
//   - the UEID table and the SMC-R device list are global: any netns works.
//   - fallback statistics are per netns: open the pod netns to read a pod's.
package smc
