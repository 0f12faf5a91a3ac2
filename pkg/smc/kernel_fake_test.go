package smc

import (
	"strings"

	"golang.org/x/sys/unix"
)

// portKey names an RDMA device port.
type portKey struct {
	dev  string
	port uint8
}

// fakeKernel models smc_pnet.c for one netns: smc_pnet_enter,
// smc_pnet_remove_by_pnetid and _smc_pnet_dump, plus the per-port PNETIDs
// of RDMA devices (smc_ib_device.pnetid) that the DEV_SMCR dump shows.
type fakeKernel struct {
	initNet bool
	table   []PnetEntry
	ports   map[portKey]string
	errs    map[uint8]error // forced answer per pnet command
}

func newFakeKernel(initNet bool, rows ...PnetEntry) *fakeKernel {
	k := &fakeKernel{initNet: initNet, ports: map[portKey]string{}, errs: map[uint8]error{}}
	for _, r := range rows {
		k.table = append(k.table, r)
		if r.IBName != "" {
			k.ports[portKey{r.IBName, r.IBPort}] = r.PnetID
		}
	}
	return k
}

// handle dispatches a request like the two families would.
func (k *fakeKernel) handle(s sent) ([][]byte, error) {
	if s.family == fakeGenID {
		return k.devDump(), nil
	}
	if err := k.errs[s.cmd]; err != nil {
		return nil, err
	}
	switch s.cmd {
	case pnetCmdAdd:
		return nil, k.add(s)
	case pnetCmdDel:
		return nil, k.del(strings.ToUpper(s.attrOf(pnetAttrName)))
	case pnetCmdGet:
		return k.dump(), nil
	}
	return nil, unix.EOPNOTSUPP
}

// add follows smc_pnet_enter: ETH first, IB only in init_net.
func (k *fakeKernel) add(s sent) error {
	id := strings.ToUpper(s.attrOf(pnetAttrName))
	newEth, newIB := false, false
	if eth := s.attrOf(pnetAttrEthName); eth != "" {
		newEth = k.addEth(id, eth)
	}
	if !k.initNet {
		return errnoUnless(newEth)
	}
	if ib := s.attrOf(pnetAttrIBName); ib != "" {
		port := uint8(1)
		for _, a := range s.attrs {
			if a.Type == pnetAttrIBPort {
				port = a.Data[0]
			}
		}
		newIB = k.addIB(id, ib, port)
	}
	return errnoUnless(newEth || newIB)
}

func errnoUnless(ok bool) error {
	if ok {
		return nil
	}
	return unix.EEXIST
}

func (k *fakeKernel) addEth(id, eth string) bool {
	for _, r := range k.table {
		if r.EthName == eth {
			return false
		}
	}
	k.table = append(k.table, PnetEntry{PnetID: id, EthName: eth})
	return true
}

// addIB applies the PNETID to the port first, then refuses a second row for
// the same device name (smc_pnet_add_ib).
func (k *fakeKernel) addIB(id, ib string, port uint8) bool {
	key := portKey{ib, port}
	if k.ports[key] != "" {
		return false
	}
	k.ports[key] = id
	for _, r := range k.table {
		if r.IBName == ib {
			return false
		}
	}
	k.table = append(k.table, PnetEntry{PnetID: id, IBName: ib, IBPort: port})
	return true
}

// del follows smc_pnet_remove_by_pnetid.
func (k *fakeKernel) del(id string) error {
	found := false
	var keep []PnetEntry
	for _, r := range k.table {
		if r.PnetID == id {
			found = true
			continue
		}
		keep = append(keep, r)
	}
	k.table = keep
	if k.initNet {
		for key, p := range k.ports {
			if p == id {
				delete(k.ports, key)
				found = true
			}
		}
	}
	if !found {
		return unix.ENOENT
	}
	return nil
}

func (k *fakeKernel) dump() [][]byte {
	var out [][]byte
	for _, r := range k.table {
		if k.initNet || r.EthName != "" {
			out = append(out, kernelPnetMsg(r))
		}
	}
	return out
}

// devDump emits one DEV_SMCR message per port carrying a PNETID.
func (k *fakeKernel) devDump() [][]byte {
	var out [][]byte
	for key, id := range k.ports {
		out = append(out, genl(genCmdGetDevSMCR, nest(genAttrDevSMCR,
			nla(devAttrIBName, cstr(key.dev)),
			nest(devAttrPort+uint16(key.port)-1, nla(portAttrPnetUsr, []byte{1}), nla(portAttrPnetID, cstr(id))))))
	}
	return out
}
