// Package dra is rdma-chain's DRA driver (rdma-chain-dra): it publishes the
// node's RDMA NICs in one ResourceSlice, with the standard pcieRoot and
// numaNode attributes and the RDMA facts a scheduler or a user selects on,
// and prepares a claim's devices by giving its containers exactly the
// device's character devices through CDI. The CNI plugin does not import
// it: only this binary holds API credentials.
package dra
